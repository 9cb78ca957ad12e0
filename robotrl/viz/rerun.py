"""A rerun recording of the actor: cameras, joint states, generated versus executed chunks,
and latency per tick, written to an .rrd file (open it with `rerun FILE.rrd`).

Attached to the control loop as its observer; costs a few hundred microseconds per
tick, so it is off unless asked for, and images are logged every ``image_every`` ticks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rerun as rr

from robotrl.core.types import ActionChunk, FloatArray, Observation


class RerunObserver:
    def __init__(self, path: str | Path, application_id: str = "robotrl", image_every: int = 3) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._rec = rr.RecordingStream(application_id)
        self._rec.save(str(path))
        self._image_every = image_every
        self.path = Path(path)

    def on_tick(
        self,
        episode_id: int,
        observation: Observation,
        executed: FloatArray,
        proposed: FloatArray,
        lateness_s: float,
        starved: bool,
    ) -> None:
        rec = self._rec
        rec.set_time("tick", sequence=observation.tick)
        rec.set_time("episode", sequence=episode_id)
        for j, (e, p) in enumerate(zip(executed.tolist(), proposed.tolist(), strict=True)):
            rec.log(f"joints/{j}/executed", rr.Scalars(e))
            rec.log(f"joints/{j}/proposed", rr.Scalars(p))
        rec.log("timing/lateness_ms", rr.Scalars(lateness_s * 1e3))
        rec.log("timing/starved", rr.Scalars(float(starved)))
        if observation.tick % self._image_every == 0:
            for cam, img in observation.images.items():
                rec.log(f"camera/{cam}", rr.Image(img))

    def on_chunk(self, episode_id: int, chunk: ActionChunk) -> None:
        rec = self._rec
        rec.set_time("tick", sequence=chunk.ready_tick)
        rec.set_time("episode", sequence=episode_id)
        ticks = np.arange(chunk.start_tick, chunk.end_tick, dtype=np.float32)
        for j in range(chunk.actions.shape[1]):
            strip = np.stack([ticks, chunk.actions[:, j]], axis=1)
            rec.log(f"chunks/{j}/generated", rr.LineStrips2D([strip]))
        rec.log("timing/delay_ticks", rr.Scalars(float(chunk.delay_ticks)))

    def close(self) -> None:
        self._rec.flush()
