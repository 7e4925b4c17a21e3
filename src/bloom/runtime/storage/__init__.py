"""Storage: tables, the database handle and repositories. The only package that holds SQL."""
