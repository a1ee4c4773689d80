"""Live job events: a Server-Sent Events stream of steps, job state and job events."""
