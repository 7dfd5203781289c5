import json
import logging

log = logging.getLogger(__name__)


class ConfigError(Exception):
    pass


def load_config(path, defaults=None):
    defaults = defaults or {}
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        log.warning("no config at %s, using defaults", path)
        return dict(defaults)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"bad config {path!r}") from exc
    else:
        log.debug("loaded %d keys", len(data))
    finally:
        log.debug("done reading %s", path)
    merged = {**defaults, **data}
    for key in ("host", "port"):
        if key not in merged:
            raise ConfigError("missing key: " + key)
    port = merged["port"]
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError("port out of range")
    return merged


def safe_div(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return float("nan")
