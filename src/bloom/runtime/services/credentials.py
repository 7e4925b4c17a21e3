"""Keys and users: made and revoked by operators (the `bloom key` and `bloom user` commands),
checked on every request that carries them; logins, with failures locking out the user name and
the client address for a while."""

from dataclasses import dataclass

import anyio
import structlog

from bloom.domain.audit import LOCKED_ADDRESS, LOCKED_USERNAME, lockout_audit
from bloom.domain.clock import Clock
from bloom.domain.credentials import (
    DECOY_HASH,
    ApiKey,
    LoginPolicy,
    User,
    hash_key,
    hash_password,
    key_prefix,
    new_key,
    password_problem,
    verify_password,
)
from bloom.domain.errors import Conflict, Invalid, NotFound, Throttled
from bloom.domain.fleet import WORKER_ID
from bloom.domain.identity import Role
from bloom.domain.ids import new_id
from bloom.runtime.storage.repositories import RuntimeDatabase
from bloom.web.lockout import Lockouts

log = structlog.get_logger(__name__)

SHOWN_USERNAME_CHARS = 100
"""Of a name tried at the login, what an audit entry and a log line show."""


@dataclass(frozen=True, slots=True)
class NewKey:
    key: ApiKey
    secret: str
    """Shown once, never stored."""


@dataclass(frozen=True, slots=True)
class _Subject:
    """What a failed login counts against: the user name tried, or the client address."""

    kind: str
    name: str
    key: str
    """Its counters' key."""
    limit: int
    """Failures before a lockout."""


class PasswordHasher:
    """scrypt off the event loop, in at most `threads` threads at a time: a flood of logins
    queues here instead of stalling every other request (~40 ms of CPU each)."""

    def __init__(self, threads: int):
        self.limiter = anyio.CapacityLimiter(threads)

    async def hash(self, password: str) -> str:
        return await anyio.to_thread.run_sync(hash_password, password, limiter=self.limiter)

    async def verify(self, password: str, stored: str) -> bool:
        return await anyio.to_thread.run_sync(
            verify_password, password, stored, limiter=self.limiter
        )


class CredentialService:
    def __init__(
        self,
        db: RuntimeDatabase,
        clock: Clock,
        *,
        hasher: PasswordHasher,
        lockouts: Lockouts,
        policy: LoginPolicy,
    ):
        self.db = db
        self.clock = clock
        self.hasher = hasher
        self.lockouts = lockouts
        self.policy = policy

    async def create_key(self, name: str, role: Role, worker_id: str | None = None) -> NewKey:
        if role is Role.WORKER and (worker_id is None or not WORKER_ID.match(worker_id)):
            raise Invalid("a worker key names its worker (a valid worker name)")
        if role is not Role.WORKER and worker_id is not None:
            raise Invalid("only a worker key names a worker")
        secret = new_key(role)
        now = self.clock()
        key = ApiKey(
            id=new_id(now),
            name=name,
            role=role,
            key_hash=hash_key(secret),
            prefix=key_prefix(secret),
            worker_id=worker_id,
            created_at=now,
        )
        async with self.db.write() as tx:
            await tx.api_keys.insert(key)
        return NewKey(key, secret)

    async def keys(self) -> list[ApiKey]:
        async with self.db.read() as tx:
            return await tx.api_keys.find()

    async def revoke_key(self, ref: str) -> ApiKey:
        async with self.db.write() as tx:
            revoked = await tx.api_keys.revoke(ref, self.clock())
            if len(revoked) > 1:
                raise Conflict(f"'{ref}' names more than one key: use its id")  # rolled back
        if not revoked:
            raise NotFound(f"No active key '{ref}'")
        return revoked[0]

    async def key_by_hash(self, key_hash: str) -> ApiKey | None:
        """The active key with this SHA-256 (`hash_key`), if any."""
        async with self.db.read() as tx:
            return await tx.api_keys.active_by_hash(key_hash)

    async def create_user(self, username: str, password: str, role: Role) -> User:
        problem = password_problem(password)
        if problem:
            raise Invalid(f"password {problem}")
        now = self.clock()
        user = User(new_id(now), username, await self.hasher.hash(password), role, now)
        async with self.db.write() as tx:
            if await tx.users.by_username(username) is not None:
                raise Conflict(f"User '{username}' exists")
            await tx.users.insert(user)
        return user

    async def set_password(self, username: str, password: str, role: Role) -> User:
        problem = password_problem(password)
        if problem:
            raise Invalid(f"password {problem}")
        async with self.db.write() as tx:
            user = await tx.users.set_password(username, await self.hasher.hash(password), role)
        if user is None:
            raise NotFound(f"No user '{username}'")
        return user

    async def users(self) -> list[User]:
        async with self.db.read() as tx:
            return await tx.users.find()

    async def login(self, username: str, password: str, address: str) -> User | None:
        """The user, when the password is theirs; None when it is not: a failure counted against
        the name (known or not) and the client address. `Throttled`, unchecked, while either is
        locked out."""
        name = _Subject(
            LOCKED_USERNAME,
            username,
            f"user/{hash_key(username)}",
            self.policy.max_failures_per_user,
        )
        source = _Subject(
            LOCKED_ADDRESS, address, f"address/{address}", self.policy.max_failures_per_address
        )
        wait = await self.lockouts.locked_for([name.key, source.key])
        if wait:
            raise Throttled("Too many failed logins, please try again later", retry_after_sec=wait)
        async with self.db.read() as tx:
            user = await tx.users.by_username(username)
        if await self.hasher.verify(password, user.password if user else DECOY_HASH) and user:
            await self.lockouts.forgive(name.key)
            return user
        for subject in (name, source):
            failures = await self.lockouts.fail(subject.key, self.policy.window_sec)
            seconds = self.policy.lockout_sec(failures, subject.limit)
            if seconds:
                await self.lockouts.lock(subject.key, seconds)
                await self._audit_lockout(subject, address, failures, seconds)
        return None

    async def _audit_lockout(
        self, subject: _Subject, address: str, failures: int, seconds: int
    ) -> None:
        shown = subject.name[:SHOWN_USERNAME_CHARS]
        detail = f"{failures} failed logins: locked out for {seconds} s"
        log.warning(
            "login_locked_out", locked=subject.kind, name=shown, address=address, seconds=seconds
        )
        entry = lockout_audit(subject.kind, shown, now=self.clock(), actor=address, detail=detail)
        async with self.db.write() as tx:
            await tx.audit.add(entry)

    async def user(self, user_id: str) -> User | None:
        async with self.db.read() as tx:
            return await tx.users.get(user_id)
