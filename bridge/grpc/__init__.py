"""The facebridge.v1 gRPC stream (proto/facebridge/v1/facebridge.proto): server sink and generated code."""
