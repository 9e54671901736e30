"""Scale-out placements that reuse the renderer's batch loop: several GPUs of this machine, local chunk
processes, and a Ray farm."""
