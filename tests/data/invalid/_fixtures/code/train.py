print('never run: these specs are invalid')
