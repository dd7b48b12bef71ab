print("groupsync")
