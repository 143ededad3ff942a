"""PaddleNLP's 2025 launcher name: ``python run_rl.py CONFIG.{json,yaml} [--key value ...]`` is run_ppo.py."""

from run_ppo import main, shutdown_distributed

if __name__ == "__main__":
    main()
    shutdown_distributed()  # the process exits next: leave the process group cleanly
