"""fedagent: federated lip-sync personalisation and signed model updates (coming next)."""
