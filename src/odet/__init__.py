"""odet: ODE Transformers in PyTorch — Runge–Kutta Transformer blocks and continuous-depth
Transformers, with the toolkit to train and use them."""

from odet._version import __version__
from odet.blocks import ODEBlock
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.ode import TABLEAUS, ButcherTableau, odeint_fixed, rk_step

__all__ = [
    "TABLEAUS",
    "ButcherTableau",
    "ODEBlock",
    "Seq2Seq",
    "Seq2SeqConfig",
    "__version__",
    "odeint_fixed",
    "rk_step",
]
