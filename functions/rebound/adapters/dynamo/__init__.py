"""DynamoDB: the store (``store``), its transactions (``unit_of_work``) and the item codec (``codec``)."""

from rebound.adapters.dynamo.codec import CONTROL, DOC, from_item, to_item
from rebound.adapters.dynamo.store import DynamoStore
from rebound.adapters.dynamo.unit_of_work import WRITE_ATTEMPTS, UnitOfWork
from rebound.adapters.staging import MAX_TRANSACTION_ITEMS

__all__ = [
    "CONTROL",
    "DOC",
    "MAX_TRANSACTION_ITEMS",
    "WRITE_ATTEMPTS",
    "DynamoStore",
    "UnitOfWork",
    "from_item",
    "to_item",
]
