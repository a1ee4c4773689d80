"""Every SQL statement on the nodes of a job over several machines (``job_nodes``)."""

from __future__ import annotations

from sqlalchemy import delete, func, select, update

from service.jobs.status import NODE_STATES, NodeState
from service.models import JobNode
from service.repository import Repository


class JobNodeRepository(Repository):
    def placement(self, job_id: str, placement_id: str | None = None) -> list[JobNode]:
        """The job's node rows in node order (only ``placement_id``'s when given)."""
        statement = select(JobNode).where(JobNode.job_id == job_id)
        if placement_id is not None:
            statement = statement.where(JobNode.placement_id == placement_id)
        return list(self.session.scalars(statement.order_by(JobNode.node_rank)))

    def join(
        self, job_id: str, node_rank: int, placement_id: str, worker_id: str, address: str
    ) -> None:
        self.session.add(
            JobNode(
                job_id=job_id,
                node_rank=node_rank,
                placement_id=placement_id,
                worker_id=worker_id,
                address=address,
                state=NodeState.WAITING.value,
                joined_at=func.now(),
                heartbeat_at=func.now(),
            )
        )

    def age_s(self, node: JobNode) -> float:
        """Seconds since ``node`` joined, by the database's clock."""
        age = self.session.scalar(select(func.extract("epoch", func.now() - node.joined_at)))
        return float(age or 0)

    def launch(self, nodes: list[JobNode], rendezvous_port: int) -> None:
        """Every node joined: node 0 publishes where the launchers meet."""
        nodes[0].rendezvous_port = rendezvous_port
        for node in nodes:
            self.move(node, NodeState.LAUNCHED)

    def move(self, node: JobNode, target: NodeState, detail: str | None = None) -> None:
        NODE_STATES.ensure(node.node_rank, NodeState(node.state), target)
        node.state = target.value
        if detail is not None:
            node.detail = detail

    def report_end(
        self, job_id: str, node_rank: int, placement_id: str, target: NodeState, detail: str | None
    ) -> None:
        """A node's processes ended (``target``: finished or failed); node 0 reads it."""
        node = self.session.scalar(
            select(JobNode)
            .where(
                JobNode.job_id == job_id,
                JobNode.node_rank == node_rank,
                JobNode.placement_id == placement_id,
            )
            .with_for_update()
        )
        if node is None:
            return  # the placement is over: nobody reads it any more
        self.move(node, target, detail)
        node.heartbeat_at = func.now()

    def beat(self, job_id: str, node_rank: int, placement_id: str) -> None:
        self.session.execute(
            update(JobNode)
            .where(
                JobNode.job_id == job_id,
                JobNode.node_rank == node_rank,
                JobNode.placement_id == placement_id,
            )
            .values(heartbeat_at=func.now())
        )

    def drop(self, job_id: str, placement_id: str | None = None) -> None:
        """The job's placement goes (only ``placement_id``'s rows when given)."""
        statement = delete(JobNode).where(JobNode.job_id == job_id)
        if placement_id is not None:
            statement = statement.where(JobNode.placement_id == placement_id)
        self.session.execute(statement)
