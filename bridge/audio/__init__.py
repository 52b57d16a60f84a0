"""Audio input and lip-sync."""
