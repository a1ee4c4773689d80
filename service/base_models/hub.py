"""The Hugging Face hub, the one outside service the pre-flight asks: does this model exist?"""

from __future__ import annotations

DEFAULT_ENDPOINT = "https://huggingface.co"


class ModelNotOnHub(Exception):
    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        self.endpoint = endpoint


class HubUnreachable(Exception):
    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"{endpoint}: {reason}")
        self.endpoint = endpoint
        self.reason = reason


def find_on_hub(repo_id: str, *, endpoint: str | None, timeout_s: float) -> None:
    """Return when ``repo_id`` is a model on the hub (a gated one included: it exists, and the
    workers' token decides access); raise ModelNotOnHub or HubUnreachable otherwise.

    ``endpoint`` None means huggingface_hub's own (``HF_ENDPOINT``, else huggingface.co).
    """
    # Imported here: only jobs naming a hub id pay for it.
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    api = HfApi(endpoint=endpoint)
    shown = endpoint or constants.ENDPOINT or DEFAULT_ENDPOINT
    try:
        api.model_info(repo_id, timeout=timeout_s)
    except GatedRepoError:
        return
    except RepositoryNotFoundError:
        raise ModelNotOnHub(shown) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        raise HubUnreachable(shown, f"it answered HTTP {status}") from None
    except Exception as exc:  # the client's transport errors: refused, reset, timed out
        raise HubUnreachable(shown, f"{type(exc).__name__}: {exc}") from None
