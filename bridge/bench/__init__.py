"""Benchmarks behind `facebridge bench`."""
