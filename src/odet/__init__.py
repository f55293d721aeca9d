"""odet: ODE Transformers in PyTorch."""
