"""The running bridge: the session that builds, owns and closes source, pipeline, audio, sinks and control; the
threads and latest-wins queues between them; one statistics window that every reader shares."""
