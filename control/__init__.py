"""FASER's gRPC control plane (the FaserControl service); see proto/faser/v1/control.proto."""
