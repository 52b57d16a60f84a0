"""Frame sources: camera, video file, image folder, bundled sample."""
