"""Task and batch types, loaders, built-in task generators, chat templating and collation."""
