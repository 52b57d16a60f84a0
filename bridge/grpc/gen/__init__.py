"""Code generated from proto/ by tools/gen_proto.py. Do not edit; regenerate."""
