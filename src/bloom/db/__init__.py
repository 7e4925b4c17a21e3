"""The database engine both servers share: connections, statement execution, the repository
base and migrations. No tables: each server keeps its own."""
