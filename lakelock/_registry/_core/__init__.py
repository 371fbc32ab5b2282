"""The commit protocol as a sans-I/O core (docs/ARCHITECTURE.md, "The commit core")."""
