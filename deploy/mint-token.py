#!/usr/bin/env python3
"""Mints a roomd session token for a given user id (HS256, as gateway/src/auth.rs).

For replaying a reported game on a LOCAL roomd (deploy/RUNBOOK.md "Replay a reported
game"): the replay API serves only participants, so the operator mints a token for one of
the game's players with the LOCAL node's secret. Never use a production secret here.

  deploy/mint-token.py USER_ID [NAME] [SECRET]
SECRET defaults to $ROOMD__AUTH__SECRET, else the secret a local embedded node generated
in its data directory ($ROOMD__STORE__PATH, default roomd-data, file auth-secret).
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    user = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else "operator"
    secret = sys.argv[3] if len(sys.argv) > 3 else os.environ.get("ROOMD__AUTH__SECRET")
    if not secret:
        path = os.path.join(os.environ.get("ROOMD__STORE__PATH", "roomd-data"), "auth-secret")
        try:
            with open(path, encoding="utf-8") as f:
                secret = f.read().strip()
        except OSError as e:
            print(f"no SECRET given, ROOMD__AUTH__SECRET unset and {path} unreadable: {e}", file=sys.stderr)
            return 2
    header = b64(json.dumps({"typ": "JWT", "alg": "HS256"}, separators=(",", ":")).encode())
    claims = b64(json.dumps({"sub": user, "name": name, "exp": int(time.time()) + 3600}, separators=(",", ":")).encode())
    sig = b64(hmac.new(secret.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest())
    print(f"{header}.{claims}.{sig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
