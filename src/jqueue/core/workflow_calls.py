"""``WorkflowCalls``: a job's workflow (the jobs linked to it by ``after``) seen, or cancelled in
one commit."""

from __future__ import annotations

from collections.abc import Sequence

from jqueue.core.management import ManagementCalls
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job
from jqueue.domain.records import JobRecord
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.workflows import Member, workflow_of


class WorkflowCalls(ManagementCalls):
    """The calls of ``JobQueue`` on a job's workflow."""

    async def workflow(self, job_id: str) -> list[Job]:
        """Return the jobs of ``job_id``'s workflow, parents before children: the jobs it waits for
        (``after``), those that wait for it, theirs in turn, in the queue or, finished, as the
        history keeps them (their payload is not kept: empty). It reads every job and history
        record of the queue.

        Raises
        ------
        JobNotFoundError
            If the job is neither in the queue nor in its history.
        """
        return await self._members(await self._view(lambda index: workflow_of(index, job_id)))

    async def cancel_workflow(self, job_id: str) -> list[Job]:
        """Cancel every job of ``job_id``'s workflow still in the queue, in one commit (a running
        one's worker is asked to stop it, as ``cancel`` does); returns the workflow as the
        commit left it, as ``workflow`` does.

        Raises
        ------
        JobNotFoundError
            If the job is neither in the queue nor in its history.
        """

        def operation(index: QueueIndex) -> list[Member]:
            now = to_micros(utc_now())
            reason = f"its workflow was cancelled (by job {job_id})"
            for member in reversed(workflow_of(index, job_id)):  # children first: each says why
                if isinstance(member, JobRecord) and index.job(member.id) is not None:
                    index.cancel(member.id, None, now, reason)
            return workflow_of(index, job_id)

        return await self._members(await self._commits.run(operation))

    async def _members(self, members: Sequence[Member]) -> list[Job]:
        live = await self._jobs([member.as_added() for member in members if isinstance(member, JobRecord)])
        by_id = {job.id: job for job in live}
        return [by_id[member.id] if isinstance(member, JobRecord) else member.as_job() for member in members]
