"""A loop of the runtime's own, run as an asyncio task: started with the server, cancelled at shutdown."""

from __future__ import annotations

import asyncio
import contextlib


class Background:
    """Subclasses give `run` (the loop) and `task_name`; `start` and `stop` are the same for every one."""

    task: asyncio.Task[None] | None = None

    @property
    def task_name(self) -> str:
        raise NotImplementedError

    async def run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=self.task_name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it; whatever it raises on the way out is over with it."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
            self.task = None
