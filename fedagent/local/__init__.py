"""Running the Flower app: starting, watching and stopping the SuperLink, SuperNodes and ClientApp hosts (for
`fedagent server` and `fedagent client` too), the `flwr` CLI, and everything on one machine: the local federation,
`fedagent simulate` with its simulated speakers, and `fedagent bench`."""
