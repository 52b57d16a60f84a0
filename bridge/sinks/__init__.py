"""Sinks: everything that reads FaceFrames and sends or stores them."""
