"""Projects' default tool policies: set, read and removed by admins (audited); merged into each
of the project's tasks at create (`services/tasks.py`, `domain/tool_policy.effective`)."""

from dataclasses import dataclass

from bloom.domain.audit import AuditAction, tool_policy_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import InvalidField, NotFound
from bloom.domain.tool_policy import ProjectToolPolicy
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(frozen=True, slots=True)
class ToolRules:
    """What a project's default tool policy says (`PUT /tool-policies/{project}`)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    mode: str | None = None
    max_turns: int | None = None
    allow_bypass: bool = False


def _summary(policy: ProjectToolPolicy) -> str:
    parts = [
        f"{name} [{', '.join(rules)}]"
        for name, rules in (("allow", policy.allow), ("deny", policy.deny), ("ask", policy.ask))
        if rules
    ]
    if policy.mode:
        parts.append(f"mode {policy.mode}")
    if policy.max_turns:
        parts.append(f"max_turns {policy.max_turns}")
    if policy.allow_bypass:
        parts.append("bypass allowed")
    said = "; ".join(parts) or "no rules"
    return f"Tool policy of {policy.project}: {said}"[:2000]


class ToolPolicyService:
    def __init__(self, db: RuntimeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

    async def set(self, project: str, rules: ToolRules, *, actor: str) -> ProjectToolPolicy:
        """Set (replace) a project's defaults; its tasks created from now on merge them. Tasks
        created before keep the policy they were created with."""
        now = self.clock()
        policy = ProjectToolPolicy(
            project=project,
            allow=rules.allow,
            deny=rules.deny,
            ask=rules.ask,
            mode=rules.mode,
            max_turns=rules.max_turns,
            allow_bypass=rules.allow_bypass,
            updated_at=now,
            updated_by=actor,
        )
        problem = policy.problem()
        if problem:
            raise InvalidField("policy", problem)
        async with self.db.write() as tx:
            await tx.tool_policies.put(policy)
            await tx.audit.add(
                tool_policy_audit(
                    AuditAction.TOOL_POLICY_SET,
                    project,
                    now=now,
                    actor=actor,
                    detail=_summary(policy),
                )
            )
        return policy

    async def remove(self, project: str, *, actor: str) -> None:
        now = self.clock()
        async with self.db.write() as tx:
            if not await tx.tool_policies.delete(project):
                raise NotFound(f"No tool policy for project '{project}'")
            await tx.audit.add(
                tool_policy_audit(
                    AuditAction.TOOL_POLICY_REMOVED,
                    project,
                    now=now,
                    actor=actor,
                    detail=f"Tool policy of {project} removed",
                )
            )

    async def get(self, project: str) -> ProjectToolPolicy:
        async with self.db.read() as tx:
            policy = await tx.tool_policies.get(project)
        if policy is None:
            raise NotFound(f"No tool policy for project '{project}'")
        return policy

    async def find(self) -> list[ProjectToolPolicy]:
        async with self.db.read() as tx:
            return await tx.tool_policies.find()
