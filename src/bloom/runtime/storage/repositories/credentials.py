"""SQL for API keys and users."""

from sqlalchemy import bindparam, insert, or_, select, update

from bloom.db.repository import Repository, entity_columns, entity_values
from bloom.domain.credentials import ApiKey, User
from bloom.runtime.storage.tables import api_keys, users

KEY_COLUMNS = entity_columns(api_keys, ApiKey)
USER_COLUMNS = entity_columns(users, User)

_KEY_INSERT = insert(api_keys)
_KEY_BY_HASH = select(*KEY_COLUMNS).where(
    api_keys.c.key_hash == bindparam("b_hash"), api_keys.c.revoked_at.is_(None)
)
_KEYS = select(*KEY_COLUMNS).order_by(api_keys.c.created_at, api_keys.c.id)
_KEY_REVOKE = (
    update(api_keys)
    .where(
        or_(api_keys.c.id == bindparam("b_ref"), api_keys.c.prefix == bindparam("b_ref")),
        api_keys.c.revoked_at.is_(None),
    )
    .values(revoked_at=bindparam("b_now"))
    .returning(*KEY_COLUMNS)
)
_USER_INSERT = insert(users)
_USER_BY_NAME = select(*USER_COLUMNS).where(users.c.username == bindparam("b_name"))
_USER_BY_ID = select(*USER_COLUMNS).where(users.c.id == bindparam("b_id"))
_USERS = select(*USER_COLUMNS).order_by(users.c.username)
_USER_PASSWORD = (
    update(users)
    .where(users.c.username == bindparam("b_name"))
    .values(password=bindparam("b_password"), role=bindparam("b_role"))
    .returning(*USER_COLUMNS)
)


class ApiKeyRepository(Repository):
    async def insert(self, key: ApiKey) -> None:
        await self.run(_KEY_INSERT, entity_values(key, KEY_COLUMNS))

    async def active_by_hash(self, key_hash: str) -> ApiKey | None:
        return await self.one(ApiKey, _KEY_BY_HASH, {"b_hash": key_hash})

    async def find(self) -> list[ApiKey]:
        return await self.all(ApiKey, _KEYS, {})

    async def revoke(self, ref: str, now: int) -> list[ApiKey]:
        """Revoke the active key whose id or shown prefix is `ref`."""
        return await self.all(ApiKey, _KEY_REVOKE, {"b_ref": ref, "b_now": now})


class UserRepository(Repository):
    async def insert(self, user: User) -> None:
        await self.run(_USER_INSERT, entity_values(user, USER_COLUMNS))

    async def by_username(self, username: str) -> User | None:
        return await self.one(User, _USER_BY_NAME, {"b_name": username})

    async def get(self, user_id: str) -> User | None:
        return await self.one(User, _USER_BY_ID, {"b_id": user_id})

    async def find(self) -> list[User]:
        return await self.all(User, _USERS, {})

    async def set_password(self, username: str, password_hash: str, role: str) -> User | None:
        params = {"b_name": username, "b_password": password_hash, "b_role": role}
        return await self.one(User, _USER_PASSWORD, params)
