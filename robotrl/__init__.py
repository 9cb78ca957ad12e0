"""robotrl: a real-time runtime for fine-tuning robot chunk policies online.

The hardware-agnostic runtime lives here: core types and protocols (``core``),
the wire codec (``wire``), Hydra configs (``config``), benchmarks (``bench``) and
the ``robotrl`` command (``cli``); later the transport, policies, actor, learner
and visualisation. The simulated world is ``robotrl.sim`` (folder ``sim/``) and
the real arm is ``robotrl.hardware`` (folder ``hardware/``). See DESIGN.md.
"""

__version__ = "0.1.0"
