"""A DynamoDB client that lets another handler's write land between two of this one's."""

from __future__ import annotations


class Interleaving:
    """The real boto3 client, with a hook run right after one kind of write: another handler's
    write landing between two of this one's, as concurrent invocations on AWS can."""

    def __init__(self, client, after_update_containing: str, then):
        self._client, self._marker, self._then, self.fired = (
            client,
            after_update_containing,
            then,
            0,
        )

    def __getattr__(self, name):
        return getattr(self._client, name)

    def update_item(self, **request):
        response = self._client.update_item(**request)
        if self._marker in request["UpdateExpression"] and not self.fired:
            self.fired += 1
            self._then()
        return response
