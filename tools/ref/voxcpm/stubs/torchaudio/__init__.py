"""Stand-in for torchaudio: voxcpm imports it at module level (its v1 model's prompt path);
the VoxCPM2 path never calls it, and no torchaudio build targets the CPU torch 2.13."""
