"""Start ppokit's reward server: `python reward_server.py [--task NAME | --function FILE.py:fn | --model PATH | --judge MODEL]
[--host 127.0.0.1] [--port 8731] [--token T] [--workers N] [--insecure]`. See docs/reward-server.md."""

from ppokit.rewards.cli import main

if __name__ == "__main__":
    main()
