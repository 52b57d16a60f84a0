"""One module per `facebridge` subcommand."""
