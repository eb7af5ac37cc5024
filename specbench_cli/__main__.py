from specbench_cli.cli.main import main

main()
