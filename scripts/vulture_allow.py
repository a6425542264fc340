# Names vulture cannot see used (scripts/test.sh runs it over the whole tree).
# ruff: noqa
# fmt: off
_ = object()

# Called by frameworks: pytest hooks and module marks, http.server handlers, tokenizers
# attributes set for the library to read.
pytest_addoption
pytest_collection_modifyitems
pytestmark
protocol_version
_.log_message
_.do_GET
_.do_PUT
_.do_PATCH
_.do_DELETE
_.pre_tokenizer
_.decoder
_.chat_template
_.handle_starttag  # html.parser.HTMLParser
_.daemon_threads  # socketserver
_.exc_text  # logging.LogRecord, read by the formatter
exc_type  # __aexit__'s signature
tb

# The catalogue's label values: the contract that alerts/ and dashboards/ spell their
# selectors with (they adopt them in the same wave as this list).
PROCESS_MEMORY_KINDS
PSS_KINDS
MEMORY_EVENTS
PRESSURE_LEVELS
KV_MEDIA
