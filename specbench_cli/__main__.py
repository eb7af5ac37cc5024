from specbench_cli.app import main

main()
