from jingpai.cli import main

main()
