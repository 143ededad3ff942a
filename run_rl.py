"""PaddleNLP's 2025 launcher name: ``python run_rl.py CONFIG.{json,yaml} [--key value ...]`` is run_ppo.py."""

from run_ppo import exit_launched_process, main

if __name__ == "__main__":
    main()
    exit_launched_process()
