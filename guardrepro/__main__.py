from guardrepro.cli import main

main()
