"""The Flower app: what runs inside Flower's processes, on the devices (client_app, data_store, task, faults) and
on the server (server_app, strategy, workflow, events). `flwr run` names `fedagent.app.server_app:app` and
`fedagent.app.client_app:app` (app/project.py writes the project). This room never starts or stops a process
(that is fedagent/local/); the server app's one publish step is fedagent/publisher/release.py."""
