"""The real world, imported as ``robotrl.hardware``: any lerobot robot as a robotrl env.

``env`` (the adapter), ``safety`` (limits, watchdog, e-stop, arm guard), ``supervisor`` (the
process that holds the arm when the actor dies or hangs), ``events`` (the human), ``factory``
(from ``hardware.*`` config), ``profile_latency`` and ``check`` (CLI roles), ``fake_serial`` /
``fake_so101`` / ``fake_pty`` (servos behind a fake serial port, or a pty shared by processes),
``fake_camera`` (a lerobot camera with no device). Nothing is imported here, so
``import robotrl.hardware`` costs nothing on a host without an arm.
"""
