"""The `rft-server` command: it starts each role of a deployment (API, worker, inference
server) and runs its operations (migrate, create-key). It sits above service/ and workers/, the
one package that imports both."""
