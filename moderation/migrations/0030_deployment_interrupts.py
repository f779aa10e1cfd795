"""One item per interrupt of a LangGraph deployment's thread (moderation.models.DeploymentInterrupt)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('moderation', '0029_task_queue_notify'),
    ]

    operations = [
        migrations.CreateModel(
            name='DeploymentInterrupt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=128)),
                ('interrupt_id', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('deployment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='interrupts', to='moderation.deployment')),
                ('item', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deployment_interrupts', to='moderation.queueitem')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('deployment', 'thread_id', 'interrupt_id'), name='deployment_interrupt_asked_once')],
            },
        ),
    ]
