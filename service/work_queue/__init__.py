"""The work queue between the API and the workers: the Celery app and its queue names, sending
a job or an export, and the adverts through which workers say what they can hold. The API
sends; workers (which import it from here) consume and advertise."""
