"""robotrl: a real-time runtime for fine-tuning robot chunk policies online.

The hardware-agnostic runtime lives here: core types and protocols (``core``),
the wire codec (``wire``), the transport, policies, actor, learner, Hydra configs
(``config``), experiments, benchmarks (``bench``), visualisation and the ``robotrl``
command (``cli``). The simulated world is ``robotrl.sim`` (folder ``sim/``) and
the real arm is ``robotrl.hardware`` (folder ``hardware/``). See docs/architecture.md.
"""

__version__ = "0.1.0"
