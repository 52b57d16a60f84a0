"""fedagent: the federated update agent. It personalises the lip-sync adapter on the device with Flower under
secure aggregation, and publishes and installs signed model releases (the device-side checks live in
bridge/updates, so facebridge itself refuses an unverified model)."""
