"""The real world, imported as ``robotrl.hardware``: any lerobot robot as a robotrl env.

``env`` (the adapter), ``safety`` (limits, watchdog, e-stop, arm guard), ``events`` (the
human), ``factory`` (from ``hardware.*`` config), ``profile_latency`` and ``check``
(CLI roles), ``fake_serial`` / ``fake_so101`` (servos behind a fake serial port). Nothing
is imported here, so ``import robotrl.hardware`` costs nothing on a host without an arm.
"""
