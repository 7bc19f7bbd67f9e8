"""The command line: one module per subcommand; it imports the core, never the reverse."""
