"""Keys and users: made and revoked by operators (the `bloom key` and `bloom user` commands),
checked on every request that carries them."""

from dataclasses import dataclass
from functools import cache

from bloom.domain.clock import Clock
from bloom.domain.credentials import (
    ApiKey,
    User,
    hash_key,
    hash_password,
    key_prefix,
    new_key,
    password_problem,
    verify_password,
)
from bloom.domain.errors import Conflict, Invalid, NotFound
from bloom.domain.fleet import WORKER_ID
from bloom.domain.identity import Role
from bloom.domain.ids import new_id
from bloom.runtime.storage.repositories import RuntimeDatabase


@cache
def _decoy_hash() -> str:
    """Checked against when the user does not exist, so that a wrong name costs as much as a
    wrong password and the time taken does not tell which names exist."""
    return hash_password("not a password of anyone's", salt=b"decoy-salt-bytes")


@dataclass(frozen=True, slots=True)
class NewKey:
    key: ApiKey
    secret: str
    """Shown once, never stored."""


class CredentialService:
    def __init__(self, db: RuntimeDatabase, clock: Clock):
        self.db = db
        self.clock = clock

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
        user = User(new_id(now), username, hash_password(password), role, now)
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
            user = await tx.users.set_password(username, hash_password(password), role)
        if user is None:
            raise NotFound(f"No user '{username}'")
        return user

    async def users(self) -> list[User]:
        async with self.db.read() as tx:
            return await tx.users.find()

    async def login(self, username: str, password: str) -> User | None:
        """The user, when the password is theirs."""
        async with self.db.read() as tx:
            user = await tx.users.by_username(username)
        if user is None:
            verify_password(password, _decoy_hash())
            return None
        return user if verify_password(password, user.password) else None

    async def user(self, user_id: str) -> User | None:
        async with self.db.read() as tx:
            return await tx.users.get(user_id)
