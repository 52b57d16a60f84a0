"""Omniverse / USD: a UsdSkel face rig (usd_face), live stream application (live_stream) and the Kit extension
(kit_extension, config/extension.toml). Everything but kit_extension runs with plain usd-core."""
