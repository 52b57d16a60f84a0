"""Many face streams, one GPU: the batched runners, the images decoded for them and the batched passes, and the
engine process of `facebridge serve --front-ends N` that owns them (engine.py, its shared-memory rings in
rings.py). It knows no gRPC stream and no front end: bridge/serving/ (the wire, the streams, the scale-out)
uses it, never the reverse (tests/test_layout.py)."""
