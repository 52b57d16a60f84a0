"""Publishing signed releases: the TUF keys, the repository a release is written into, the HTTP server for it,
the Flower server's publish step, throw-away keys for simulations, and `fedagent bench-update`."""
