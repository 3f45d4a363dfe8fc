"""Test fixture for tests/storage: talks to the S3-compatible server the test started.

  s3_fixture.py ENDPOINT make-user            -> prints "ACCESS_KEY SECRET_KEY" of a new IAM user
                                                 allowed s3:* (3 IAM calls: start moto with
                                                 INITIAL_NO_AUTH_ACTION_COUNT=3 and it checks
                                                 every later request's signature)
  s3_fixture.py ENDPOINT upload BUCKET DIR    -> creates BUCKET, uploads every file under DIR
                                                 (keys are the paths relative to DIR)

Credentials for the fixture's own calls come from the environment (AWS_ACCESS_KEY_ID, ...).
Runs with the venv's python (boto3 comes with moto).
"""
import json
import os
import sys

import boto3


def client(endpoint, service):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


def main(argv):
    endpoint, command = argv[1], argv[2]
    if command == "make-user":
        iam = client(endpoint, "iam")
        iam.create_user(UserName="sluice")
        iam.put_user_policy(
            UserName="sluice", PolicyName="s3",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="sluice")["AccessKey"]
        print(key["AccessKeyId"], key["SecretAccessKey"])
        return 0
    if command == "upload":
        bucket, root = argv[3], argv[4]
        s3 = client(endpoint, "s3")
        s3.create_bucket(Bucket=bucket)
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                path = os.path.join(folder, name)
                s3.upload_file(path, bucket, os.path.relpath(path, root))
        return 0
    print("unknown command", command, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
