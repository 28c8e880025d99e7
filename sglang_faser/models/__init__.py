"""Small checkpoints that sglang-faser makes or ships, so that nothing is ever downloaded."""
