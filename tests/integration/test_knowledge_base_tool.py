"""search_docs asks a Bedrock knowledge base through the real client, against a stand-in."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

from loopback_http import LoopbackServer

from functions.tools.knowledge_base import knowledge_base_tool, retrieve_client


class KnowledgeBaseHandler(BaseHTTPRequestHandler):
    """Bedrock Agent Runtime's ``Retrieve`` (``POST /knowledgebases/{id}/retrieve``), as JSON."""

    received: ClassVar[list] = []

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append((self.path, body, self.headers.get("Authorization", "")))
        answer = {
            "retrievalResults": [
                {
                    "content": {
                        "text": "Barge-in cancels the turn. The next answer starts at once."
                    },
                    "location": {
                        "type": "S3",
                        "s3Location": {"uri": "s3://docs/guide/barge-in.md"},
                    },
                    "score": 0.8123,
                }
            ]
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


async def test_search_docs_asks_a_knowledge_base_through_the_real_client():
    with LoopbackServer(KnowledgeBaseHandler) as server:

        def client():
            return retrieve_client(
                region_name="us-east-1",
                endpoint_url=server.url,
                aws_access_key_id="x",
                aws_secret_access_key="y",
            )

        tool = knowledge_base_tool("KB12345678", client)
        reply = await tool.run(tool.input_model(query="barge-in"))
    path, body, authorization = KnowledgeBaseHandler.received[-1]
    assert path == "/knowledgebases/KB12345678/retrieve"
    assert body == {
        "retrievalQuery": {"text": "barge-in"},
        "retrievalConfiguration": {"vectorSearchConfiguration": {"numberOfResults": 3}},
    }
    assert authorization.startswith("AWS4-HMAC-SHA256")  # signed, as Bedrock wants it
    assert reply["matches"] == [
        {
            "file": "barge-in.md",
            "heading": "",
            "excerpt": "Barge-in cancels the turn. The next answer starts at once.",
            "summary": "Barge-in cancels the turn.",
            "score": 0.812,
        }
    ]
