"""Access control lists: Valkey 9.1's users, selectors, permissions and log, and the ACL command family.

  rules      the error codes of a rule (ACLSetUserStringError) and rule-text helpers
  universe   the commands and categories a rule can name (from the command table)
  keys       which keys of a command a user reads or writes (key specs and their flags)
  selectors  one selector: commands, keys, channels, databases
  passwords  password hashing and ACL GENPASS
  user       a user: passwords, flags, its root selector and the others
  check      may this user run this command on these keys, channels and database
  pubsub     channel permissions of a subscribed client
  store      the users (ACL SETUSER/DELUSER/LIST, ACL LOAD's file)
  log        ACL LOG
  handlers   the ACL command itself (registered with the command table as the `acl` family)

The server's side (who is logged in, AUTH, the file, pushing users to a cluster) is server/acl.py."""
