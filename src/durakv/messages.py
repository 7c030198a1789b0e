"""Every error reply text, verbatim as Valkey sends it (prefix included, no leading '-').

The one home: no other module spells a reply text (tests/unit/test_messages_home.py checks the source). A config
value's problem (config.c's text after "CONFIG SET failed ... - ") stays with its option's rule in config.py,
the one home of each option's facts; the Lua prelude's own runtime errors are Lua source (scripting/prelude.py)."""

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
OVERFLOW = "ERR increment or decrement would overflow"
INCR_NAN = "ERR increment would produce NaN or Infinity"
NO_SUCH_KEY = "ERR no such key"
INDEX_OUT_OF_RANGE = "ERR index out of range"
DB_INDEX_OUT_OF_RANGE = "ERR DB index is out of range"
INVALID_EXPIRE = "ERR invalid expire time in '{}' command"
WRONG_ARITY = "ERR wrong number of arguments for '{}' command"
UNKNOWN_COMMAND = "ERR unknown command '{}', with args beginning with: {}"
UNKNOWN_SUBCOMMAND = "ERR unknown subcommand '{}'. Try {} HELP."
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NO_PASSWORD = ("ERR AUTH <password> called without any password configured for the default user. "
                    "Are you sure your configuration is correct?")
OOM = "OOM command not allowed when used memory > 'maxmemory'."
READONLY = "READONLY You can't write against a read only replica."
# a primary of a region that was fenced or replaced by its peer region (replication/region_role.py): a Valkey
# client treats it as a replica's refusal (no retry here); the text says which fence
REGION_FENCED = "READONLY You can't write against a fenced region: {}"
REDIRECT = "REDIRECT {}"
SCRIPT_DEBUG_NO_ENGINE = "ERR No scripting engine found with name '{}' to enable debug"
SCRIPT_ENGINE_NOT_FOUND = "ERR Could not find scripting engine '{}'"   # an EVAL shebang's engine (Valkey 9)
MULTI_NESTED = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
NOT_ALLOWED_IN_MULTI = "ERR Command '{}' not allowed inside a transaction"   # the command's full name (9.x)
NOPROTO = "NOPROTO unsupported protocol version"
MAX_CLIENTS = "ERR max number of clients reached"
HASH_VALUE_NOT_INTEGER = "ERR hash value is not an integer"
HASH_VALUE_NOT_FLOAT = "ERR hash value is not a float"
MIN_MAX_NOT_FLOAT = "ERR min or max is not a float"
MIN_MAX_NOT_LEX = "ERR min or max not valid string range item"
XX_NX_INCOMPATIBLE = "ERR XX and NX options at the same time are not compatible"
GT_LT_NX_INCOMPATIBLE = "ERR GT, LT, and/or NX options at the same time are not compatible"
INCR_ONE_PAIR = "ERR INCR option supports a single increment-element pair"
SCORE_NAN = "ERR resulting score is not a number (NaN)"
NX_XX_GT_LT_INCOMPATIBLE = "ERR NX and XX, GT or LT options at the same time are not compatible"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"
SAME_OBJECT = "ERR source and destination objects are the same"
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
NUMKEYS_ZERO = "ERR numkeys should be greater than 0"
MSETEX_BAD_NUMKEYS = "ERR invalid numkeys value or out of range"
COUNT_ZERO = "ERR count should be greater than 0"
VALUE_OUT_OF_RANGE_POSITIVE = "ERR value is out of range, must be positive"
CLUSTERDOWN_DURABILITY = ("CLUSTERDOWN The durability buffer is full: the journal is more than {} ms behind; "
                          "writes are refused until it catches up")
BUSY_LOADING = "LOADING Valkey is loading the dataset in memory"
# CONFIG SET durability while a standalone server loads: the journal is opened once the load ends (the reason
# part of CONFIG_BAD_VALUE)
DURABILITY_WHILE_LOADING = "durability cannot change while the dataset is loading"
SAVE_IN_PROGRESS = "ERR Background save already in progress"
NO_SUCH_CLIENT = "ERR No such client"
CONFIG_UNKNOWN = "ERR Unknown option or number of arguments for CONFIG SET - '{}'"
CONFIG_BAD_VALUE = "ERR CONFIG SET failed (possibly related to argument '{}') - {}"
CONFIG_IMMUTABLE = "ERR CONFIG SET failed (possibly related to argument '{}') - can't set immutable config"
# config.c updatePort / applyTLSPort: the new port could not be bound (the reason is in the server log)
CONFIG_LISTEN_FAILED = "Unable to listen on this port. Check server logs."
CONFIG_REWRITE_FAILED = "ERR Rewriting config file: {}"
MAXCLIENTS_OS_LIMIT = "The operating system is not able to handle the specified number of clients, try with {}"
REPLCONF_UNKNOWN_RDB_CLIENT = "ERR Unrecognized RDB client id {}"
PORT_IN_SHARD_TOPOLOGY = ("this node's address is part of its shard's topology in the coordination store; restart "
                          "the node with --port to move it")
CLIENT_NAME_SPACES = "ERR Client names cannot contain spaces, newlines or special characters."
PROTOCOL_ERROR = "ERR Protocol error: {}"
# The request parser's protocol errors (networking.c handleParseError). These alone carry no prefix: the
# connection sends them as "-ERR <text>" and then closes.
PROTO_BIG_INLINE = "Protocol error: too big inline request"
PROTO_BIG_MBULK_COUNT = "Protocol error: too big mbulk count string"
PROTO_INVALID_MULTIBULK = "Protocol error: invalid multibulk length"
PROTO_UNAUTH_MULTIBULK = "Protocol error: unauthenticated multibulk length"
PROTO_UNAUTH_BULK = "Protocol error: unauthenticated bulk length"
PROTO_BIG_BULK_COUNT = "Protocol error: too big bulk count string"
PROTO_EXPECTED_DOLLAR = "Protocol error: expected '$', got '{}'"
PROTO_INVALID_BULK = "Protocol error: invalid bulk length"
PROTO_UNBALANCED_QUOTES = "Protocol error: unbalanced quotes in request"
# durakv's own: Valkey closes such a client without a reply (and logs it).
PROTO_QUERY_BUFFER_LIMIT = "Protocol error: client query buffer limit reached"
# -- lists / sorted sets --
VALUE_OUT_OF_RANGE = "ERR value is out of range"
VALUE_MUST_BETWEEN = "ERR value is out of range, value must between {} and {}"
LPOS_RANK_ZERO = ("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
                  "or use negative to start from the end of the list")
LPOS_COUNT_NEGATIVE = "ERR COUNT can't be negative"
LPOS_MAXLEN_NEGATIVE = "ERR MAXLEN can't be negative"
ZSET_AT_LEAST_ONE_KEY = "ERR at least 1 input key is needed for '{}' command"
WEIGHT_NOT_FLOAT = "ERR weight value is not a float"
LIMIT_NEGATIVE = "ERR LIMIT can't be negative"
ZRANGE_LIMIT_NEEDS_BY = "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
ZRANGE_WITHSCORES_BYLEX = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
# -- hashes / sets --
VALUE_NAN_OR_INF = "ERR value is NaN or Infinity"
NUMKEYS_GT_ARGS = "ERR Number of keys can't be greater than number of args"
INVALID_CURSOR = "ERR invalid cursor"
UNKNOWN_TYPE_NAME = "ERR unknown type name '{}'"
NOVALUES_ONLY_HSCAN = "ERR NOVALUES option can only be used in HSCAN"
NOSCORES_ONLY_ZSCAN = "ERR NOSCORES option can only be used in ZSCAN"
DECREMENT_OVERFLOW = "ERR decrement would overflow"
GT_LT_INCOMPATIBLE = "ERR GT and LT options at the same time are not compatible"
UNSUPPORTED_OPTION = "ERR Unsupported option {}"
# hash field expiration (Valkey 9: HEXPIRE, HSETEX, HGETEX, HGETDEL, HPERSIST)
NUMFIELDS_MISMATCH = "ERR numfields should be greater than 0 and match the provided number of fields"
# -- bitmaps / HyperLogLog / LCS --
BIT_OFFSET = "ERR bit offset is not an integer or out of range"
BIT_VALUE = "ERR bit is not an integer or out of range"
BITFIELD_TYPE = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."
BITFIELD_OVERFLOW = "ERR Invalid OVERFLOW type specified"
BITFIELD_RO_GET_ONLY = "ERR BITFIELD_RO only supports the GET subcommand"
BITOP_NOT_ONE_KEY = "ERR BITOP NOT must be called with a single source key."
BITPOS_BIT = "ERR The bit argument must be 1 or 0."
LCS_NOT_STRINGS = "ERR The specified keys must contain string values"
LCS_LEN_AND_IDX = "ERR If you want both the length and indexes, please just use IDX."
LCS_TOO_LONG = "ERR String too long for LCS"
LCS_TOO_MUCH_MEMORY = "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
HLL_WRONGTYPE = "WRONGTYPE Key is not a valid HyperLogLog string value."
HLL_INVALID = "INVALIDOBJ Corrupted HLL object detected"
# -- generic leftovers / introspection (SORT DUMP RESTORE WAIT OBJECT SLOWLOG LATENCY) --
SUBCOMMAND_SYNTAX = "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP."
SLOWLOG_COUNT = "ERR count should be greater than or equal to -1"
COMMANDLOG_TYPE = "ERR type should be one of the following: slow, large-request, large-reply"
LATENCY_NO_SAMPLES = "ERR No samples available for event '{}'"
OBJECT_IDLETIME_LFU = ("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when "
                       "switching between policies at runtime LRU and LFU data will take some time to adjust.")
OBJECT_FREQ_NOT_LFU = ("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that "
                       "when switching between policies at runtime LRU and LFU data will take some time to adjust.")
SORT_SCORE_NOT_DOUBLE = "ERR One or more scores can't be converted into double"
DUMP_PAYLOAD_INVALID = "ERR DUMP payload version or checksum are wrong"
DUMP_BAD_DATA = "ERR Bad data format"
BUSYKEY = "BUSYKEY Target key name already exists."
MIGRATE_KEYS_NEED_EMPTY_KEY = "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
MIGRATE_TARGET_ERROR = "ERR Target instance replied with error: {}"
MIGRATE_IOERR_READING = "IOERR error or timeout reading to target instance"
RESTORE_BAD_TTL = "ERR Invalid TTL value, must be >= 0"
RESTORE_BAD_IDLETIME = "ERR Invalid IDLETIME value, must be >= 0"
RESTORE_BAD_FREQ = "ERR Invalid FREQ value, must be >= 0 and <= 255"
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
TIMEOUT_OUT_OF_RANGE = "ERR timeout is out of range"
WAIT_REPLICA = ("ERR WAIT cannot be used with replica instances. Please also note that if a replica is configured "
                "to be writable (which is not the default) writes to replicas are just local and are not propagated.")
WAITAOF_REPLICA = ("ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are "
                   "just local and are not propagated.")
WAITAOF_NO_AOF = "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled."
# -- streams --
STREAM_INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
XADD_ID_TOO_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
XADD_ID_ZERO = "ERR The ID specified in XADD must be greater than 0-0"
STREAM_EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
STREAM_MAXLEN_MINID = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
STREAM_MAXLEN_NEGATIVE = "ERR The MAXLEN argument must be >= 0."
STREAM_LIMIT_NEGATIVE = "ERR The LIMIT argument must be >= 0."
STREAM_LIMIT_NO_STRATEGY = "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
XTRIM_NO_STRATEGY = "ERR syntax error, XTRIM must be called with a trimming strategy"
STREAM_LIMIT_NO_APPROX = "ERR syntax error, LIMIT cannot be used without the special ~ option"
STREAM_INVALID_START = "ERR invalid start ID for the interval"
STREAM_INVALID_END = "ERR invalid end ID for the interval"
XREAD_UNBALANCED = "ERR Unbalanced '{}' list of streams: for each stream key an ID or '{}' must be specified."
XREAD_GROUP_ONLY = "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
XREAD_NOACK_ONLY = "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
XREADGROUP_MISSING_GROUP = "ERR Missing GROUP option for XREADGROUP"
XREADGROUP_NOGROUP = "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option"
XREADGROUP_SPECIAL_ID = ("ERR The {0} ID is meaningless in the context of XREADGROUP: you want to read the history "
                         "of this consumer by specifying a proper ID, or use the > ID to get new messages. The {0} "
                         "ID would just return an empty result set.")
XREAD_GT_ID = ("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> "
               "option.")
XREAD_LAST_ID_ZERO = "ERR the stream last element ID is 0-0"
STREAM_NOGROUP = "NOGROUP No such key '{}' or consumer group '{}'"
STREAM_NOGROUP_FOR_KEY = "NOGROUP No such consumer group '{}' for key name '{}'"
STREAM_BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
XGROUP_KEY_REQUIRED = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to "
                       "use the MKSTREAM option to create an empty stream automatically.")
XGROUP_ENTRIESREAD_INVALID = "ERR value for ENTRIESREAD must be positive or -1"
XSETID_ENTRIES_ADDED_NEGATIVE = "ERR entries_added must be positive"
XSETID_BELOW_GIVEN_MAXDELETED = "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
XSETID_BELOW_MAXDELETED = "ERR The ID specified in XSETID is smaller than current max_deleted_entry_id"
XSETID_BELOW_TOP = "ERR The ID specified in XSETID is smaller than the target stream top item"
XSETID_ENTRIES_ADDED_SMALL = "ERR The entries_added specified in XSETID is smaller than the target stream length"
XCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XCLAIM"
XCLAIM_IDLE = "ERR Invalid IDLE option argument for XCLAIM"
XCLAIM_TIME = "ERR Invalid TIME option argument for XCLAIM"
XCLAIM_RETRYCOUNT = "ERR Invalid RETRYCOUNT option argument for XCLAIM"
XCLAIM_UNRECOGNIZED = "ERR Unrecognized XCLAIM option '{}'"
XAUTOCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XAUTOCLAIM"
XAUTOCLAIM_COUNT = "ERR COUNT must be > 0"
# -- blocking / pub/sub / client extras --
UNBLOCKED_BY_CLIENT = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
UNBLOCK_REASON = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
PUBSUB_CONTEXT = ("ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are "
                  "allowed in this context")
REPLICA_KEYSPACE = "ERR Replica can't interact with the keyspace"
SUBCOMMAND_SYNTAX = "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP."
DENY_BLOCKING = "ERR {} isn't allowed for a DENY BLOCKING client"
MONITOR_DENY_BLOCKING = "ERR MONITOR isn't allowed for DENY BLOCKING client"
PAUSE_MODE = "ERR CLIENT PAUSE mode must be WRITE or ALL"
TRACKING_ONE_REDIRECT = "ERR A client can only redirect to a single other client"
TRACKING_REDIRECT_MISSING = "ERR The client ID you want redirect to does not exist"
TRACKING_PREFIX_NEEDS_BCAST = "ERR PREFIX option requires BCAST mode to be enabled"
TRACKING_SWITCH_BCAST = ("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and "
                         "then re-enabling it with a different mode.")
TRACKING_OPTIN_BCAST = "ERR OPTIN and OPTOUT are not compatible with BCAST"
TRACKING_OPTIN_OPTOUT = "ERR You can't specify both OPTIN mode and OPTOUT mode"
TRACKING_SWITCH_OPTIN = ("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and "
                         "then re-enabling it with a different mode.")
TRACKING_PREFIX_OVERLAP = ("ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client "
                           "must not overlap.")
TRACKING_PREFIX_OVERLAP_ARGS = ("ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a "
                                "single client must not overlap.")
CACHING_NOT_TRACKING = ("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or "
                        "OPTOUT mode enabled")
CACHING_YES_OPTIN = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
CACHING_NO_OPTOUT = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
# -- scripting (EVAL / FUNCTION) --
NOSCRIPT = "NOSCRIPT No matching script."
NUMKEYS_NEGATIVE = "ERR Number of keys can't be negative"
FCALL_BAD_NUMKEYS = "ERR Bad number of keys provided"
FUNCTION_NOT_FOUND = "ERR Function not found"
LIBRARY_NOT_FOUND = "ERR Library not found"
SCRIPT_RO_WRITE_FLAG = "ERR Can not execute a script with write flag using *_ro command."
SCRIPT_NO_CLUSTER = "ERR Can not run script on cluster, 'no-cluster' flag is set."
BUSY_SCRIPT = "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
BUSY_FUNCTION = "BUSY Valkey is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
NOTBUSY = "NOTBUSY No scripts in execution right now."
UNKILLABLE = ("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either "
              "wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
GEO_INVALID_PAIR = "ERR invalid longitude,latitude pair %f,%f"
GEO_UNSUPPORTED_UNIT = "ERR unsupported unit provided. please use M, KM, FT, MI"
GEO_NEED_RADIUS = "ERR need numeric radius"
GEO_RADIUS_NEGATIVE = "ERR radius cannot be negative"
GEO_NEED_WIDTH = "ERR need numeric width"
GEO_NEED_HEIGHT = "ERR need numeric height"
GEO_BOX_NEGATIVE = "ERR height or width cannot be negative"
GEO_DECODE_MEMBER = "ERR could not decode requested zset member"
GEO_COUNT_POSITIVE = "ERR COUNT must be > 0"
GEO_STORE_WITH = "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
GEO_FROM_ONE = "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {}"
GEO_BY_ONE = "ERR exactly one of BYRADIUS, BYBOX and BYPOLYGON can be specified for {}"
GEO_POLYGON_VERTICES = "ERR GEOSEARCH BYPOLYGON must have at least 3 vertices"
GEO_POLYGON_BAD_COUNT = "ERR invalid number of vertices"
GEO_ANY_NEEDS_COUNT = "ERR the ANY argument requires COUNT argument"
# -- the pipeline: EXEC aborts and script calls (server.c rejectCommand/execCommandAbort, script.c scriptCall) --
EXECABORT_BECAUSE = "EXECABORT Transaction discarded because of: {}"
SCRIPT_UNKNOWN_COMMAND = "ERR Unknown command called from script"
SCRIPT_WRONG_ARITY = "ERR Wrong number of args calling command from script"
SCRIPT_NOT_ALLOWED = "ERR This Valkey command is not allowed from script"
SCRIPT_WRITE_IN_RO = "ERR Write commands are not allowed from read-only scripts."
MASTERDOWN_STALE = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
REPLICA_BEHIND = ("MASTERDOWN This replica is {} ms behind the shard's journal (more than replica-max-lag-ms); "
                  "read from the primary or another replica")
LEASE_EXPIRED = "CLUSTERDOWN The primary's lease expired; it is not serving until it is renewed"
# -- cluster mode (Valkey 8.0 cluster.c, script.c, db.c) --
MOVED = "MOVED {} {}:{}"
ASK = "ASK {} {}:{}"
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
TRYAGAIN = "TRYAGAIN Multiple keys request during rehashing of slot"
CLUSTERDOWN_STATE = "CLUSTERDOWN The cluster is down"
CLUSTERDOWN_RO_STATE = "CLUSTERDOWN The cluster is down and only accepts read commands"
CLUSTERDOWN_UNBOUND = "CLUSTERDOWN Hash slot not served"
CLUSTER_DISABLED = "ERR This instance has cluster support disabled"
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."
CLUSTER_RESET_UNSUPPORTED = ("ERR CLUSTER RESET is not supported: durakv nodes take the topology from the "
                             "coordination store (durakv cluster remove-shard / stop-node)")
CLUSTER_INVALID_SLOT = "ERR Invalid slot"
# -- Valkey 9.1's cluster words (cluster.c, cluster_legacy.c, cluster_slot_stats.c, cluster_migrateslots.c) --
CLUSTER_BAD_SLOT = "ERR Invalid or out of range slot"
CLUSTER_RANGE_START_GT_END = "ERR start slot number {} is greater than end slot number {}"
SLOT_STATS_START_GT_END = "ERR Start slot number {} is greater than end slot number {}"
SLOT_STATS_BAD_METRIC = "ERR Unrecognized sort metric for ORDERBY."
SLOT_STATS_BAD_LIMIT = "ERR Limit has to lie in between 1 and 16384 (maximum number of slots)."
SLOT_STATS_REPEATED = "ERR Multiple filters of the same type are disallowed."
SETSLOT_NOT_OWNER = "ERR I'm not the owner of hash slot {}"
SETSLOT_ALREADY_OWNER = "ERR I'm already the owner of hash slot {}"
SETSLOT_UNKNOWN_NODE = "ERR I don't know about node {}"
SETSLOT_BAD_ACTION = "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"
CLUSTER_FORGET_MYSELF = "ERR I tried hard but I can't forget myself..."
CLUSTER_MEET_BAD_PORT = "ERR Invalid base port specified: {}"
CLUSTER_MEET_BAD_BUS_PORT = "ERR Invalid bus port specified: {}"
CLUSTER_BAD_CONFIG_EPOCH = "ERR Invalid config epoch specified: {}"
MIGRATESLOTS_NO_END = "ERR No end slot for final slot range"
MIGRATESLOTS_BAD_NODE = "ERR Invalid node name: {}"
MIGRATESLOTS_START_GT_END = "ERR Start slot number {} is greater than end slot number {}."
MIGRATESLOTS_NOT_PRIMARY = "ERR Slot migration can only be used on primary nodes."
MIGRATESLOTS_NO_RANGES = "ERR No slot ranges specified"
MIGRATESLOTS_UNSERVED_SLOT = "ERR Slot {} has no node served."
MIGRATESLOTS_SPANS_SHARDS = "ERR Requested slots span multiple shards"
MIGRATESLOTS_RANGE_OVERLAP = "ERR Slot range {}-{} overlaps with previous range {}-{}."
MIGRATESLOTS_NOT_SERVED = "ERR Slots are not served by this node."
MIGRATESLOTS_ALREADY = "ERR I am already migrating slot {}."
MIGRATESLOTS_GROUPS_OVERLAP = "ERR Slot ranges in migrations overlap"
MIGRATESLOTS_UNKNOWN_NODE = "ERR Unknown node name: {}"
MIGRATESLOTS_TO_MYSELF = "ERR Target node can not be this node."
NO_SLOT_MIGRATIONS = "ERR No migrations ongoing"
ADDSLOTS_BUSY = "ERR Slot {} is already busy"
DELSLOTS_UNASSIGNED = "ERR Slot {} is already unassigned"
ADDSLOTS_TWICE = "ERR Slot {} specified multiple times"
FLUSHSLOTS_NOT_EMPTY = "ERR DB must be empty to perform CLUSTER FLUSHSLOTS."
CLUSTERSCAN_BAD_CURSOR = "ERR Invalid cursor"
CLUSTERSCAN_SLOT_MISMATCH = "ERR Cursor slot mismatch with SLOT argument"
# durakv's refusals: the topology lives in the coordination store, changed by `durakv cluster ...`
CLUSTER_TOPOLOGY_UNSUPPORTED = ("ERR CLUSTER {} is not supported: {}")
CLUSTER_SLOTS_IN_STORE = "slots are assigned in the coordination store; use durakv cluster reshard"
CLUSTER_NODES_IN_STORE = ("nodes join and leave through the coordination store; use durakv cluster add-node / "
                          "del-node / replace-node")
CLUSTER_ROLES_IN_STORE = ("a node's shard and role come from the coordination store; use durakv cluster "
                          "start-node / failover")
CLUSTER_CONFIG_IN_STORE = "the topology is kept in the coordination store, not in a nodes.conf"
CLUSTER_EPOCHS_IN_STORE = ("config epochs are set by compare-and-set on the coordination store's topology; use "
                           "durakv cluster reshard / failover")
CLUSTER_MIGRATION_IN_STORE = ("slot migrations are driven by the coordination store's topology; use durakv "
                              "cluster reshard")
# durakv's own, for the slot words it carries out on the stored topology (compare-and-set, cluster/reshard.py)
MIGRATESLOTS_TARGET_REPLICA = ("ERR Target node {} is a replica: name the primary of the shard the slots "
                               "should move to")
CLUSTER_CHANGE_FAILED = "ERR {}"
CLUSTER_TOPOLOGY_FIXED = ("this node's topology is its own (a one-node cluster on the local journal has no "
                          "coordination store to change)")
CLUSTER_SLOT_OTHER_SHARD = ("ERR Slot {} is owned by shard {}: send CLUSTER DELSLOTS to one of that shard's "
                            "nodes")
REPLICA_APPLY_STOPPED = ("MASTERDOWN This replica stopped applying the shard's journal at {} (it serves no data "
                         "until an operator deals with that entry)")
JOIN_REFUSED = "ERR durakv: cannot join: {}"
# DURAKV BACKUP (server/backup.py): what `durakv backup create --host/--port` copies a single server with
BACKUP_IN_CLUSTER = ("ERR durakv: a cluster's shards are backed up through its NATS, not one node: durakv backup "
                     "create --secrets DIR --to DEST")
BACKUP_NO_JOURNAL = ("ERR durakv: this server keeps no journal (durability none): a backup is a snapshot plus the "
                     "journal after it; switch to async or sync first (CONFIG SET durability sync)")
BACKUP_TOO_MANY = "ERR durakv: {} backup sessions are open already (END them, or wait for them to expire)"
DURAKV_PREFIX = "ERR durakv: "  # what durakv's own errors start with (a tool strips it when it reports one)
BACKUP_READ_FAILED = "ERR durakv: backup read failed: {}"
BACKUP_NO_SESSION = "ERR durakv: no such backup session (it ended, or expired after 120 s without a request)"
BACKUP_JOURNAL_GONE = ("ERR durakv: the journal no longer holds entry {} (it starts at {}): take the backup again "
                       "once a snapshot covers it")
BACKUP_OUTSIDE_RANGE = "ERR durakv: entry {} is outside this backup session's journal range {}..{}"
JOIN_NEEDS_JETSTREAM = ("ERR durakv: only a node started with --journal-backend jetstream can join a cluster (this one "
                        "keeps its journal on its own disk)")
ACL_SHARE_FAILED = "ERR the cluster's ACL users could not be stored: {}"
CLUSTER_OTHER_SHARD = ("ERR CLUSTER {}: a node changes only its own shard's slots (its NATS identity may write "
                       "nothing else); send it to a node of the shard that owns the slot, or use durakv cluster "
                       "reshard")
CLUSTER_MANUAL_MIGRATION = ("durakv moves a slot's keys itself (through the target's journal), so the manual "
                            "MIGRATING/IMPORTING/STABLE states have nothing to mean; use CLUSTER MIGRATESLOTS "
                            "or CLUSTER SETSLOT <slot> NODE <node-id>")
CLUSTER_SYNCSLOTS_INTERNAL = ("SYNCSLOTS is the protocol between two Valkey nodes of an atomic slot "
                              "migration; durakv's nodes move keys through the target's journal instead "
                              "(CLUSTER MIGRATESLOTS starts one)")
# FAILOVER (replication.c failoverCommand)
FAILOVER_NO_REPLICAS = "ERR FAILOVER requires connected replicas."
FAILOVER_IN_CLUSTER = "ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead."
FAILOVER_ON_REPLICA = "ERR FAILOVER is not valid when server is a replica."
FAILOVER_NOT_IN_PROGRESS = "ERR No failover in progress."
FAILOVER_BAD_TIMEOUT = "ERR FAILOVER timeout must be greater than 0"
# CLIENT IMPORT-SOURCE (networking.c)
NOT_IMPORT_MODE = "ERR Server is not in import mode"
CLUSTER_INVALID_SLOT_OR_COUNT = "ERR Invalid slot or number of keys"
CLUSTER_NO_ID = "ERR No ID yet"
CLUSTER_NO_SHARD_ID = "ERR No shard ID yet"
CLUSTER_UNKNOWN_NODE = "ERR Unknown node {}"
CLUSTER_NOT_A_MASTER = "ERR The specified node is not a master"
SWAPDB_IN_CLUSTER = "ERR SWAPDB is not allowed in cluster mode"
# Errors of a command called from a script (scriptVerifyClusterState); the script runner adds its trailer.
SCRIPT_CLUSTERDOWN_RO = "ERR Script attempted to execute a write command while the cluster is down and readonly"
SCRIPT_CLUSTERDOWN = "ERR Script attempted to execute a command while the cluster is down"
SCRIPT_CROSSSLOT_CALL = "ERR Command '{}' in script attempted to access keys that don't hash to the same slot"
SCRIPT_TRYAGAIN = ("ERR Unable to execute command '{}' in script because undeclared keys were accessed during "
                   "rehashing of the slot")
SCRIPT_UNBOUND = "ERR Script attempted to access a slot not served"
SCRIPT_NON_LOCAL_KEY = "ERR Script attempted to access a non local key in a cluster node"
SCRIPT_CROSSSLOT = "ERR Script attempted to access keys that do not hash to the same slot"
# -- ACL --
NOPERM_EXEC = ("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. "
               "This command is no longer allowed for the following reason: {}")
NOPERM_SCRIPT = "ERR ACL failure in script: {}"
NO_SUCH_USER = "ERR No such user '{}'"
ACL_DEFAULT_NOT_REMOVABLE = "ERR The 'default' user cannot be removed"
ACL_UNKNOWN_CATEGORY = "ERR Unknown category '{}'"
ACL_GENPASS_BITS = ("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number "
                    "up to 4096")
ACL_DRYRUN_NO_USER = "ERR User '{}' not found"
ACL_DRYRUN_NO_COMMAND = "ERR Command '{}' not found"
SORT_BY_ACL = "ERR BY option of SORT denied due to insufficient ACL permissions."
SORT_GET_ACL = "ERR GET option of SORT denied due to insufficient ACL permissions."
ACL_USERNAME_SPACES = "ERR Usernames can't contain spaces or null characters"
ACL_NO_ACLFILE = ("ERR This instance is not configured to use an ACL file. You may want to specify users via the ACL "
                  "SETUSER command and then issue a CONFIG REWRITE (assuming you have a configuration file set) in "
                  "order to store users in the configuration.")
ACL_SAVE_FAILED = "ERR There was an error trying to save the ACLs. Please check the server logs for more information"
# getAclErrorMessage (after "NOPERM ", "ERR ACL failure in script: ", or alone in ACL DRYRUN)
ACL_DENIED_CMD = "User {} has no permissions to run the '{}' command"
ACL_DENIED_VERBOSE = "User {} has no permissions to access the '{}' {}"
ACL_DENIED = "No permissions to access a {}"
ACL_DENIED_DB = "No permissions to access database"                              # Valkey 9.1's db= rules
ACL_DENIED_DB_VERBOSE = "User {} has no permissions to access database {}"
ACL_EXEC_REASON_CMD = "no permission to execute the command or subcommand"
ACL_EXEC_REASON_KEY = "no permission to touch the specified keys"
ACL_EXEC_REASON_CHANNEL = "no permission to access one of the channels used as arguments"
ACL_EXEC_REASON_DB = "no permission"
# ACL SETUSER (without "ERR ") and the reasons of ACLSetUserStringError
ACL_SETUSER_MODIFIER = "Error in ACL SETUSER modifier '{}': {}"
ACL_SETUSER_UNMATCHED = "Unmatched parenthesis in acl selector starting at '{}'."
ACL_RULE_UNKNOWN = "Unknown command or category name in ACL"
ACL_RULE_SYNTAX = "Syntax error"
ACL_RULE_KEYS_AFTER_ALL = ("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
                           "have any effect. Try 'resetkeys' to start with an empty list of patterns")
ACL_RULE_CHANNELS_AFTER_ALL = ("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and "
                               "does not have any effect. Try 'resetchannels' to start with an empty list of channels")
ACL_RULE_NO_SUCH_PASSWORD = "The password you are trying to remove from the user does not exist"
ACL_RULE_BAD_HASH = ("The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
                     "characters")
ACL_RULE_DUPLICATE_USER = "Duplicate user found. A user can only be defined once in config files"
ACL_RULE_SUBCOMMAND_FIRSTARG = "Allowing first-arg of a subcommand is not supported"
ACL_RULE_WRONG_FORMAT = "Wrong format"
ACL_RULE_DB_RANGE = "The provided database ID is out of range"
# ACL LOAD (ACLLoadFromFile): the problems of every line, then the verdict (after "ERR ")
ACL_FILE_NOT_USER = "{}:{} should start with user keyword followed by the username. "
ACL_FILE_BAD_USERNAME = "'{}:{}: username '{}' contains invalid characters. "
ACL_FILE_DUPLICATE = "WARNING: Duplicate user '{}' found on line {}. "
ACL_FILE_UNMATCHED = "{}:{}: Unmatched parenthesis in selector definition."
ACL_FILE_UNKNOWN_OP = "{}:{}: Error in applying operation '{}': {}. "
ACL_FILE_OTHER = "{}:{}: {}. "
ACL_FILE_VERDICT = "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
ACL_FILE_OPEN = "Error loading ACLs, opening file '{}': {}"
ACL_NO_SERVER = "ERR ACL needs a running server"  # durakv's own: a dispatcher without a server has no users
# -- a journal that cannot persist (Valkey's MISCONF: "Errors writing to the AOF file") --
JOURNAL_FAILED_WRITES = "MISCONF Errors writing to the journal: {}. Writes are refused until it can persist again."
JOURNAL_FAILED_WRITE = ("MISCONF Errors writing to the journal: {}. This write, or the write this read waited for, "
                        "may not be durable.")
CLUSTER_SUPPORT_DISABLED = "ERR This instance has cluster support disabled"
# -- CLIENT KILL --
CLIENT_ID_POSITIVE = "ERR client-id should be greater than 0"
MAXAGE_NOT_INTEGER = "ERR maxage is not an integer or out of range"
MAXAGE_POSITIVE = "ERR maxage should be greater than 0"
# COMMAND GETKEYS / GETKEYSANDFLAGS (getKeysSubcommandImpl)
GETKEYS_INVALID_COMMAND = "ERR Invalid command specified"
GETKEYS_NO_KEYS = "ERR The command has no key arguments"
GETKEYS_BAD_ARITY = "ERR Invalid number of arguments specified for command"
GETKEYS_BAD_ARGUMENTS = "ERR Invalid arguments specified for command"
# HELLO and CLIENT LIST / KILL (helloCommand, clientListCommand, clientKillCommand)
HELLO_PROTO_NOT_INTEGER = "ERR Protocol version is not an integer or out of range"
HELLO_BAD_OPTION = "ERR Syntax error in HELLO option '{}'"
CLIENT_UNKNOWN_TYPE = "ERR Unknown client type '{}'"
# CLIENT LIST / KILL filters (parseClientFiltersOrReply, Valkey 9): the NOT- forms name the filter
CLIENT_IDLE_NOT_INTEGER = "ERR idle is not an integer or out of range"
CLIENT_IDLE_POSITIVE = "ERR idle should be greater than 0"
CLIENT_UNKNOWN_FLAGS = "ERR Unknown flags found in the provided filter: {}"
CLIENT_UNKNOWN_NOT_FLAGS = "ERR Unknown flags found in the NOT-FLAGS filter: {}"
CLIENT_UNKNOWN_CAPA = "ERR Unknown capa found in the provided filter: {}"
CLIENT_UNKNOWN_NOT_CAPA = "ERR Unknown capa found in the NOT-CAPA filter: {}"
CLIENT_DB_NOT_INTEGER = "ERR {} is not an integer or out of range"            # DB / NOT-DB
CLIENT_DB_RANGE = "ERR {} number should be between 0 and {}"
# FUNCTION LOAD / LIST (functionLoadCommand, functionListCommand)
FUNCTION_LOAD_UNKNOWN_OPTION = "ERR Unknown option given: {}"
FUNCTION_LIST_NO_LIBRARY_NAME = "ERR library name argument was not given"
FUNCTION_LIST_UNKNOWN_ARGUMENT = "ERR Unknown argument {}"
# -- Valkey's safe defaults (networking.c clientAcceptHandler, server.c processCommand, tls.c tlsConfigure) --
# Sent as the whole greeting to a client refused by protected mode, then the connection is closed.
PROTECTED_MODE_DENIED = (
    "DENIED Running in protected mode because protected mode is enabled and no password is set for the default "
    "user. In this mode connections are only accepted from the loopback interface. If you want to connect from "
    "external computers, you may adopt one of the following solutions: 1) Just disable protected mode sending the "
    "command 'CONFIG SET protected-mode no' from the loopback interface by connecting from the same host the "
    "server is running, however MAKE SURE it's not publicly accessible from internet if you do so. Use CONFIG "
    "REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing "
    "the configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If "
    "you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set "
    "up an authentication password for the default user. NOTE: You only need to do one of the above things in "
    "order for the server to start accepting connections from the outside.")
# DEBUG / MODULE LOAD|LOADEX|UNLOAD refused by enable-debug-command / enable-module-command: (command, option)
PROTECTED_COMMAND = ("ERR {} command not allowed. If the {} option is set to \"local\", you can run it from a local "
                     "connection, otherwise you need to set this option in the configuration file, and then restart "
                     "the server.")
# start-up refused: TLS on, client certificates asked for (or TLS between cluster nodes), and no CA to check them
TLS_NO_CA = ("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or "
             "tls-auth-clients are enabled!")
TLS_CONFIGURE_FAILED = "Failed to configure TLS. Check logs for more info."
# -- valkey-json (util.cc jsonutil_code_to_message): its error codes, by the names keyspace/jsonpath.py uses --
JSON_ERRORS = {
    "PARSE": "SYNTAXERR Failed to parse JSON string due to syntax error",
    "NX_XX_EXCLUSIVE": "SYNTAXERR Option NX and XX should be mutually exclusive",
    "INVALID_PATH": "SYNTAXERR Invalid JSON path",
    "INVALID_MEMBER_NAME": "SYNTAXERR Invalid object member name",
    "INVALID_NUMBER": "SYNTAXERR Invalid number",
    "INVALID_IDENTIFIER": "SYNTAXERR Invalid identifier",
    "INVALID_DOT_SEQUENCE": "SYNTAXERR Invalid dot sequence",
    "EMPTY_EXPR_TOKEN": "SYNTAXERR Expression token cannot be empty",
    "INDEX_NOT_NUMBER": "SYNTAXERR Array index is not a number",
    "STEP_ZERO": "SYNTAXERR Step in the slice cannot be zero",
    "INVALID_WILDCARD": "ERR Invalid use of wildcard",
    "PATH_NOT_EXIST": "NONEXISTENT JSON path does not exist",
    "PARENT_NOT_EXIST": "NONEXISTENT Parent element does not exist",
    "DOC_KEY_NOT_FOUND": "NONEXISTENT Document key does not exist",
    "NOT_A_DOCUMENT": "WRONGTYPE Not a JSON document key",
    "DELETE_FAILED": "OPFAIL Failed to delete JSON value",
    "NOT_NUMBER": "WRONGTYPE JSON element is not a number",
    "NOT_BOOL": "WRONGTYPE JSON element is not a bool",
    "NOT_STRING": "WRONGTYPE JSON element is not a string",
    "NOT_OBJECT": "WRONGTYPE JSON element is not an object",
    "NOT_ARRAY": "WRONGTYPE JSON element is not an array",
    "VALUE_NOT_NUMBER": "WRONGTYPE Value is not a number",
    "VALUE_NOT_STRING": "WRONGTYPE Value is not a string",
    "VALUE_NOT_INTEGER": "WRONGTYPE Value is not an integer",
    "PATH_AT_END": "SYNTAXERR Path arguments should be positioned at the end",
    "SYNTAX": "SYNTAXERR Command syntax error",
    "MULT_OVERFLOW": "OVERFLOW Multiplication would overflow",
    "ADD_OVERFLOW": "OVERFLOW Addition would overflow",
    "EMPTY_OBJECT": "EMPTYVAL Empty JSON object",
    "EMPTY_ARRAY": "EMPTYVAL Empty JSON array",
    "OUT_OF_BOUNDS": "OUTOFBOUNDARIES Array index is out of bounds",
    "UNKNOWN_SUBCOMMAND": "SYNTAXERR Unknown subcommand",
    "LIMIT_SIZE": "LIMIT Document size limit is exceeded",
    "LIMIT_DEPTH": "LIMIT Document path nesting limit is exceeded",
    "LIMIT_RECURSION": "LIMIT Parser recursion depth is exceeded",
    "LIMIT_DESCENT": "LIMIT Total number of recursive descent tokens in the query string exceeds the limit",
    "LIMIT_QUERY": "LIMIT Query string size limit is exceeded",
    "NOT_OBJECT_INSERT": "ERROR Cannot insert a member into a non-object value",
    "INVALID_RDB": "ERROR Invalid value in RDB format",
    "DOLLAR_NOT_ROOT": "SYNTAXERR Dollar sign cannot apply to non-root element",
}
JSON_NEW_KEY_PATH_NOT_ROOT = "SYNTAXERR A new Valkey key's path must be root"
JSON_DOCUMENT_NOT_FOUND = "NONEXISTENT JSON document is not found"
JSON_TEST_SHARED_API_UNKNOWN_KEY = "Unknown key"
JSON_TEST_SHARED_API_INVALID_PATH = "Invalid Path"
# -- Bloom filters: valkey-bloom 1.0.1's texts (src/bloom/utils.rs, configs.rs) --
BF_WRONG_ARITY = "ERR wrong number of arguments for '{}' command"   # the module's declared name (BF.ADD)
BF_ERROR = "ERR ERROR"
BF_NONSCALING_FULL = "ERR non scaling filter is full"
BF_NOT_FOUND = "ERR not found"
BF_ITEM_EXISTS = "ERR item exists"
BF_INVALID_INFO_VALUE = "ERR invalid information value"
BF_INVALID_SEED = "ERR invalid seed"
BF_BAD_EXPANSION = "ERR bad expansion"
BF_BAD_CAPACITY = "ERR bad capacity"
BF_BAD_ERROR_RATE = "ERR bad error rate"
BF_ERROR_RATE_RANGE = "ERR (0 < error rate range < 1)"
BF_BAD_TIGHTENING_RATIO = "ERR bad tightening ratio"
BF_TIGHTENING_RATIO_RANGE = "ERR (0 < tightening ratio range < 1)"
BF_CAPACITY_LARGER_THAN_0 = "ERR (capacity should be larger than 0)"
BF_FP_DEGRADES_TO_ZERO = "ERR false positive degrades to 0 on scale out"
BF_UNKNOWN_ARGUMENT = "ERR unknown argument received"
BF_EXCEEDS_MEMORY_LIMIT = "ERR operation exceeds bloom object memory limit"
BF_VALIDATE_SCALE_TO_MEMORY = "ERR provided VALIDATESCALETO causes bloom object to exceed memory limit"
BF_MAX_FILTERS = "ERR bloom object reached max number of filters"
BF_VALIDATE_SCALE_TO_FP = "ERR provided VALIDATESCALETO causes false positive to degrade to 0"
BF_KEY_EXISTS = "BUSYKEY Target key name already exists."
BF_DECODE_FAILED = "ERR bloom object decoding failed"
BF_DECODE_UNSUPPORTED_VERSION = "ERR bloom object decoding failed. Unsupported version"
BF_NONSCALING_AND_VALIDATE_SCALE_TO = "ERR cannot use NONSCALING and VALIDATESCALETO options together"
# the bf.bloom-fp-rate / bf.bloom-tightening-ratio config callbacks (configs.rs on_string_config_set)
BF_CONFIG_NOT_FLOAT = "Invalid floating-point value"
# -- vector search (valkey-search 1.2's texts: its errors carry no "ERR " unless it wrote one) --
SEARCH_WRONG_ARITY = "ERR wrong number of arguments for '{}' command"
SEARCH_INDEX_NOT_FOUND = "Index with name '{}' not found in database {}"
SEARCH_INDEX_EXISTS = "Index {} in database {} already exists."
SEARCH_SCHEMA_NOT_FOUND = "Index schema not found: {}"
SEARCH_MISSING_ARGUMENT = "Missing argument"
SEARCH_BAD_ARGUMENTS_FOR = "Bad arguments for {}: {}"
SEARCH_NOT_NUMERIC = "`{}` is not a valid numeric value"
SEARCH_OUT_OF_BOUNDS = "`{}` is outside acceptable bounds"
SEARCH_NOT_FLOAT = "{} is not a valid float"
SEARCH_UNKNOWN_ARGUMENT = "Unknown argument `{}`"
SEARCH_ARGUMENT_EMPTY = "Argument value is empty"
SEARCH_UNEXPECTED_ARGUMENT = "Unexpected argument `{}`"
SEARCH_PARSING_VALUE = "Error parsing value for the parameter `{}` - {}"
SEARCH_RANGE_BELOW = "Invalid range: Value below minimum"
SEARCH_RANGE_ABOVE = "Invalid range: Value above maximum"
SEARCH_PREFIX_REQUIRED_HASHTAG = "PREFIX parameter is required for hash-tagged indexes"
SEARCH_PREFIX_COUNT_BOUNDS = "Bad arguments for PREFIX: `{}` is outside acceptable bounds"
SEARCH_PREFIX_TOO_MANY = "Invalid range: Value above maximum; Number of prefixes ({}) exceeds the maximum allowed ({})"
SEARCH_PREFIX_SAME_TAG = "All PREFIX arguments must contain the same hash tag as the index"
SEARCH_PREFIX_HAS_TAG = "PREFIX argument(s) must not contain a hash tag"
SEARCH_NOT_SUPPORTED_PARAM = "The parameter `{}` is not supported"
SEARCH_SCORE_NOT_SUPPORTED = "`SCORE` parameter with a value `{}` is not supported. The only supported value is `1.0`"
SEARCH_JSON_NOT_LOADED = "JSON module is not loaded."
SEARCH_EXPECTING_SCHEMA = "Unexpected parameter `{}`, expecting `SCHEMA`"
SEARCH_NO_ATTRIBUTES = "Index schema must have at least one attribute"
SEARCH_FIELD_TYPE = "Invalid field type for field `{}`: {}"
SEARCH_DUPLICATE_FIELD = "Duplicate field in schema - {}"
SEARCH_TOO_MANY_ATTRIBUTES = "Invalid range: Value above maximum; The maximum number of attributes cannot exceed {}."
SEARCH_ALIAS_CHAR = "Attribute alias `{}` contains invalid character `{}`"
SEARCH_VECTOR_PARAMS_COUNT = "Expected {} parameters for {} but got {} parameters."
SEARCH_MISSING_DIM = "Missing dimensions parameter."
SEARCH_DIM_RANGE = "{}; The dimensions value must be a positive integer greater than 0 and less than or equal to {}."
SEARCH_INITIAL_CAP = "INITIAL_CAP must be a positive integer greater than 0."
SEARCH_MISSING_TYPE = "Missing vector TYPE parameter."
SEARCH_MISSING_METRIC = "Missing DISTANCE_METRIC parameter."
SEARCH_M_RANGE = "{}; M must be a positive integer greater than 2 and cannot exceed {}."
SEARCH_EF_CONSTRUCTION_RANGE = "{}; EF_CONSTRUCTION must be a positive integer greater than 0 and cannot exceed {}."
SEARCH_EF_RUNTIME_RANGE = "{}; EF_RUNTIME must be a positive integer greater than 0 and cannot exceed {}."
SEARCH_SEPARATOR = "The separator must be a single character, but got `{}`"
SEARCH_TAG_IDENTIFIER_LEN = "Invalid range: Value above maximum; A tag field can have a maximum length of {}."
SEARCH_NUMERIC_IDENTIFIER_LEN = "Invalid range: Value above maximum; A numeric field can have a maximum length of {}."
# FT.SEARCH
SEARCH_UNEXPECTED_PARAMETER_AT = "Unexpected parameter at position {}:{}"
SEARCH_INVALID_QUERY_SYNTAX = "Invalid Query Syntax"
SEARCH_INVALID_QUERY_STRING = "Invalid query string syntax"
SEARCH_EF_QUERY_RANGE = "{}; `EF_RUNTIME` must be a positive integer greater than 0 and cannot exceed {}."
SEARCH_KNN_RANGE = "{}; KNN parameter must be a positive integer greater than 0 and cannot exceed {}."
SEARCH_TIMEOUT_RANGE = "TIMEOUT must be a positive integer greater than 0 and cannot exceed 60000."
SEARCH_DIALECT = "DIALECT requires a non negative integer >=2 and <= 4"
SEARCH_PARAM_NOT_USED = "Parameter `{}` not used."
SEARCH_PARAM_COUNT_ODD = "Parameter count must be an even number."
SEARCH_PARAM_DEFINED = "Parameter {} is already defined."
SEARCH_PARAM_NOT_FOUND = "Parameter {} not found."
SEARCH_UNEXPECTED_AS = "Unexpected parameter `AS` "
SEARCH_QUERY_TOO_LONG = "Query string is too long, max length is {} bytes."
SEARCH_FILTER_PREFIX = "Invalid filter expression: `{}`. {}"
SEARCH_VECTOR_PREFIX = "Error parsing vector similarity parameters: `{}`. {}"
SEARCH_VECTOR_POST_PREFIX = "Error parsing vector similarity parameters: {}"
SEARCH_VECTOR_CLAUSE_MISSING = "Vector query clause is missing"
SEARCH_EXPECT_OPEN = "Expecting '[' got '{}'"
SEARCH_MISSING_OPEN = "Missing opening bracket"
SEARCH_EXPECT_CLOSE = "Expecting ']' got '{}'"
SEARCH_MISSING_CLOSE = "Missing closing bracket"
SEARCH_KNN_MISSING_PARAMETERS = "Missing parameters"
SEARCH_EXPECTING_KNN = "`{}`. Expecting `KNN`"
SEARCH_KNN_ARG_MISSING = "KNN argument is missing"
SEARCH_VECTOR_FIELD_MISSING = "Vector field argument is missing"
SEARCH_VECTOR_FIELD_NAME = "Unexpected argument `{}`. Expecting a vector field name, starting with '@'"
SEARCH_BLOB_MISSING = "Blob attribute argument is missing"
SEARCH_EF_ARG_MISSING = "EF_RUNTIME argument is missing"
SEARCH_AS_ARG_MISSING = "AS argument is missing"
SEARCH_FIELD_NOT_VECTOR = "Index field `{}` is not a Vector index "
SEARCH_FIELD_MISSING = "Index field `{}` does not exist"
SEARCH_BLOB_SIZE = ("Error parsing vector similarity query: query vector blob size ({}) does not match index's expected "
                    "size ({}).")
SEARCH_UNEXPECTED_CHAR = "Unexpected character at position {}: `{}`"
SEARCH_UNEXPECTED_CHAR_EXPECTING = "Unexpected character at position {}: `{}`, expecting `{}`"
SEARCH_MISSING_PAREN = "Missing `)`"
SEARCH_EXPECTED_PAREN = "Expected ')' after expression got '{}'. Position: {}"
SEARCH_INVALID_NUMBER = "Invalid number: {}"
SEARCH_NUMERIC_SEPARATOR = "Expected space or `,` between start and end values of a numeric field. Position: {}"
SEARCH_EXPECTED_BRACKET = "Expected ']' got '{}'. Position: {}"
SEARCH_EMPTY_RANGE = "Start and end values of a numeric field indicate an empty range. Position: {}"
SEARCH_MISSING_TAG_BRACKET = "Missing closing TAG bracket, '}'"
SEARCH_NOT_TAG_FIELD = "`{}` is not indexed as a tag field"
SEARCH_NOT_NUMERIC_FIELD = "`{}` is not indexed as a numeric field"
SEARCH_EXPECTED_FIELD_OPEN = "Expected '[', '{{', got '{}'. Position: {}"
SEARCH_TAG_MULTIPLE_STARS = "Tag string `{}` ends with multiple *."
SEARCH_TAG_PREFIX_SHORT = "Tag string `{}` is too short for prefix wildcard."
SEARCH_QUERY_TOO_COMPLEX = "Query string is too complex"
SEARCH_SORTBY_FIELD = "Index field `{}` does not exist"
SEARCH_NO_NODES = "No available nodes to execute the query"
SEARCH_FANOUT_FAILED = "Error while fanning out the query to shard {}: {}"
SEARCH_ACL_PREFIX = "The user does not have permission to access the key prefix"

# -- what needs a client connection or a server process (the handler services) --
MONITOR_NEEDS_CONNECTION = "ERR MONITOR needs a client connection"
TRACKING_NEEDS_CONNECTION = "ERR CLIENT TRACKING needs a client connection"
PUBSUB_NEEDS_CONNECTION = "ERR pub/sub needs a client connection"
SYNC_NEEDS_CONNECTION = "ERR SYNC needs a client connection"
NEEDS_RUNNING_SERVER = "ERR %s needs a running server"
REPLICAOF_NEEDS_SERVER = "ERR REPLICAOF needs a server process"

# -- REPLCONF, SHUTDOWN ABORT, SWAPDB, REPLICAOF, MODULE (replication.c, server.c, db.c, module.c) --
REPLICAOF_IN_CLUSTER_MODE = "ERR REPLICAOF not allowed in cluster mode."
REPLICAOF_ON_SHARD_MEMBER = ("ERR REPLICAOF is not supported on a shard member: its replicas follow the shard's "
                             "journal")
REPLCONF_IP_TOO_LONG = "ERR REPLCONF ip-address provided by replica instance is too long: %d bytes"
REPLCONF_FILTER_MISSING = "ERR Missing rdb-filter-only values"
REPLCONF_FILTER_UNSUPPORTED = "ERR Unsupported rdb-filter-only option: %s"
REPLCONF_VERSION_FORMAT = "ERR Unrecognized version format: %s"
REPLCONF_UNKNOWN_OPTION = "ERR Unrecognized REPLCONF option: %s"
SHUTDOWN_NONE_IN_PROGRESS = "ERR No shutdown in progress."
SWAPDB_FIRST_INDEX = "ERR invalid first DB index"
SWAPDB_SECOND_INDEX = "ERR invalid second DB index"
NOT_VALID_FOR_REPLICA_CLIENT = "ERR Command is not valid when client is a replica."
REPLICAOF_INVALID_PORT = "ERR Invalid master port"
MODULE_LOAD_FAILED = "ERR Error loading the extension. Please check the server logs."
MODULE_UNLOAD_NO_SUCH = "ERR Error unloading module: no such module with that name"

# -- durakv's server: durability switches, shard settings, snapshots, DEBUG RELOAD --
FAILOVER_TO_PRIMARY = "ERR You should send CLUSTER FAILOVER to a replica"
FAILOVER_REQUEST_FAILED = "ERR failover request failed: %s"
RDB_EXPORT_FAILED = "ERR the RDB export's child process failed (exit status {})"
SHARD_SETTINGS_NOT_STORED = "ERR the shard's settings could not be stored: %s"
DURABILITY_SWITCH_FAILED = "ERR switching durability to %s failed: %s"
DEBUG_RELOAD_ON_SHARD_MEMBER = ("ERR DEBUG RELOAD is not supported on a shard member (its data is the shard's journal: "
                                "restart the node instead)")
DEBUG_RELOAD_LOAD_FAILED = "ERR Error trying to load the RDB dump, check server logs."
SNAPSHOT_FAILED = "ERR snapshot failed: %s"
SNAPSHOT_ON_JETSTREAM_PRIMARY = "ERR snapshots of a JetStream shard are taken on its replicas"

# -- MIGRATE (cluster.c migrateCommand's I/O errors) --
MIGRATE_IOERR_WRITING = "IOERR error or timeout writing to target instance"
MIGRATE_IOERR_CONNECTING = "IOERR error or timeout connecting to the client"
MIGRATE_IOERR_IO = "IOERR error or timeout %s to target instance"

# -- scripting: the Lua engine and the script runner (script_lua.c, eval.c, function_lua.c) --
FUNCTION_LOAD_TIMEOUT = "ERR FUNCTION LOAD timeout"
SCRIPT_KILLED = "ERR Script killed by user with SCRIPT KILL."
FUNCTION_KILLED = "ERR Script killed by user with FUNCTION KILL."
SCRIPT_INTERNAL_ERROR = "ERR internal error: %s"
SCRIPT_SERVER_SHUTTING_DOWN = "ERR the server is shutting down"
SCRIPT_RUN_ERROR = "ERR Error running script %s, %s"
SCRIPT_RUN_OOM = "ERR Error running script %s, not enough memory"
SCRIPT_RUN_ERROR_SHORT = "ERR Error running script %s, %.100s"
SCRIPT_UNKNOWN_ERROR = "ERR unknown error"
LUA_STACK_LIMIT = "ERR reached lua stack limit"
SCRIPT_REPLY_TYPE = "ERR reply of type %s cannot be passed to a script"
SCRIPT_CALL_NO_ARGS = "ERR Please specify at least one argument for this call"
SCRIPT_CALL_ARG_TYPE = "ERR Command arguments must be strings or integers"
SCRIPT_CALL_OUTSIDE_RUN = "ERR server.call() can only be used while a script runs"
SCRIPT_ACL_CHECK_INVALID = "ERR Invalid command passed to server.acl_check_cmd()"
SCRIPT_WRONG_ARGS = "ERR wrong number of arguments"
SCRIPT_LOG_ARGS = "ERR server.log() requires two arguments or more."
SCRIPT_LOG_LEVEL_TYPE = "ERR First argument must be a number (log level)."
SCRIPT_LOG_LEVEL = "ERR Invalid log level."
SCRIPT_SETRESP_ARGS = "ERR server.setresp() requires one argument."
SCRIPT_SETRESP_VERSION = "ERR RESP version must be 2 or 3."
SCRIPT_SET_REPL_ARGS = "ERR server.set_repl() requires one argument."
SCRIPT_SET_REPL_FLAGS = "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
FUNCTION_REGISTER_OUTSIDE_LOAD = "ERR server.register_function can only be called on FUNCTION LOAD command"
LUA_INDEX_FUNCTION = "attempt to index a function value"

# -- the pipeline's own --
INTERNAL_ERROR_IN = "ERR internal error in '%s': %s"
SCRIPT_COMMAND_NOT_CALLABLE = "ERR '%s' cannot be called from a script"
UNKNOWN_PREFIX = "ERR unknown"   # UNKNOWN_COMMAND and UNKNOWN_SUBCOMMAND begin so
UNKNOWN_COMMAND_PREFIX = "ERR unknown command"

# -- PFDEBUG / PFSELFTEST (hyperloglog.c) --
PFDEBUG_NO_KEY = "ERR The specified key does not exist"
PFDEBUG_UNKNOWN = "ERR Unknown PFDEBUG subcommand '%s'"
PFDEBUG_NOT_SPARSE = "ERR HLL encoding is not sparse"
PFSELFTEST_REGISTER = "ERR TESTFAILED Register %d should be %d but is %d"
PFSELFTEST_NOT_SPARSE = "ERR TESTFAILED sparse encoding not used"
PFSELFTEST_DISAGREE = "ERR TESTFAILED dense/sparse disagree"
PFSELFTEST_TOO_BIG = "ERR TESTFAILED Too big error. card:%d abserr:%d"

# -- LOLWUT, search --
SEARCH_NO_HNSWLIB = "ERR the HNSW algorithm needs the hnswlib package, which is not installed"
LOLWUT_SYNTAX = "ERR Syntax error. Use: LOLWUT [columns rows] [real imaginary]"

# -- HELLO / CLIENT SETNAME / SETINFO (networking.c) --
HELLO_NOAUTH = ("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                "select the RESP protocol version at the same time")
CLIENT_SETINFO_UNKNOWN_OPTION = "ERR Unrecognized option '%s'"
CLIENT_SETINFO_BAD_VALUE = "ERR %s cannot contain spaces, newlines or special characters."

# -- DEBUG (debug.c) and durakv's own DEBUG words --
DEBUG_PROTOCOL_RESP2 = "ERR RESP2 is not supported by this command"
DEBUG_PROTOCOL_TYPE = ("ERR Wrong protocol type name. Please use one of the following: "
                       "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false")
DEBUG_NO_JOURNAL = "ERR no journal (durability none)"
DEBUG_NOT_SHARD_REPLICA = "ERR only a replica of a shard follows a journal"
DEBUG_RELOAD_OPTIONS = "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."
DEBUG_MEMORY_VALUE = "ERR argument must be a memory value bigger than 1 and smaller than 4gb"
DEBUG_LRU_CLOCK_SECONDS = "ERR seconds must be between 0 and 16777215 (the LRU clock's range)"
DEBUG_UNKNOWN_SUBCOMMAND = "ERR unknown subcommand or wrong number of arguments for '%s'. Try DEBUG HELP."

# -- EVAL shebangs, SCRIPT and FUNCTION subcommands (eval.c, functions.c) --
SHEBANG_INVALID = "ERR Invalid script shebang"
SHEBANG_INVALID_ENGINE = "ERR Invalid engine in script shebang"
SHEBANG_UNKNOWN_OPTION = "ERR Unknown lua shebang option: %s"
SHEBANG_UNEXPECTED_FLAG = "ERR Unexpected flag in script shebang: %s"
SCRIPT_COMPILE_ERROR = "ERR Error compiling script (new function): %s"
SCRIPT_FLUSH_OPTION = "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
SCRIPT_DEBUG_UNSUPPORTED = "ERR SCRIPT DEBUG (the Lua debugger) is not supported by durakv"
SCRIPT_DEBUG_USAGE = "ERR Use SCRIPT DEBUG YES/SYNC/NO"
FUNCTION_FLUSH_OPTION = "ERR FUNCTION FLUSH only supports SYNC|ASYNC option"
FUNCTION_RESTORE_POLICY = "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
